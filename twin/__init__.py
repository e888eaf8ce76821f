"""The local twin: the synthesized workflow run end to end on one machine (see docs/twin.md)."""
