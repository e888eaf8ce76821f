"""A client for ebs-snapshot-compactor: start, follow and report compactions and batches."""
