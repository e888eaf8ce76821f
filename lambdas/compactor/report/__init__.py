"""report: the execution's outcome, sizes and timings, returned and published as an event."""
