"""The batch state machine's Lambdas (docs/batch.md): resolve a batch input into child items
(batch_input, selector, names, items) and summarize the Distributed Map's results (results,
report)."""
