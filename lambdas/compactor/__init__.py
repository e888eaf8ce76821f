"""Task Lambdas of ebs-snapshot-compactor; `compactor.handlers.<module>.handler` is one task."""
