"""One module per task of the state machine; each exposes `handler` (docs/contract.md)."""
