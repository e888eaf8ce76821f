"""sparsecopy: copy only the live data of a block device onto a blank one of the same size.

Runs on the transfer instance (Amazon Linux 2023, Python 3.9, standard library only) and in the
tests on loop devices. See docs/data-plane.md.
"""
