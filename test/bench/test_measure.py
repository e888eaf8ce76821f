from bench.measure import inspect_copy
from bench.methods import ALLOCATED
from bench.report import Record


def test_a_copy_is_checked_against_held_and_needed_exactly() -> None:
    record = Record("ext4", ALLOCATED, 1 << 30, needed_bytes=0, lower_bound_chunks=3)
    # lower bound {1, 2, 3}: the copy dropped 2 and 3 (zeros, say) and stored 9 (not held)
    inspect_copy(record, chunks={1, 5, 9}, held={1, 2, 3, 5}, lower={1, 2, 3})
    assert record.needed_absent_chunks == 2
    assert record.outside_held_chunks == 1
    inspect_copy(record, chunks={1, 2, 3}, held={1, 2, 3, 5}, lower={1, 2, 3})
    assert (record.needed_absent_chunks, record.outside_held_chunks) == (0, 0)
