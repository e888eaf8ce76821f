"""Turn allocation bitmaps (bit i = unit i in use, least significant bit first) into extents."""

import re

_RUNS = re.compile(rb"\xff+|\x00+|[^\x00\xff]")


def set_bit_runs(bitmap: bytes, units: int) -> list[tuple[int, int]]:
    """(first unit, count) for every run of set bits among the first ``units`` bits.

    Whole 0x00/0xFF bytes are skipped by a regex in C, so multi-GiB bitmaps stay fast.
    """
    runs: list[tuple[int, int]] = []

    def add(first: int, count: int) -> None:
        if first >= units:
            return
        count = min(count, units - first)
        if runs and runs[-1][0] + runs[-1][1] == first:
            runs[-1] = (runs[-1][0], runs[-1][1] + count)
        else:
            runs.append((first, count))

    for match in _RUNS.finditer(bitmap):
        value = match.group()
        first = match.start() * 8
        if value[0] == 0xFF:
            add(first, len(value) * 8)
        elif value[0] != 0:
            byte = value[0]
            for bit in range(8):
                if byte >> bit & 1:
                    add(first + bit, 1)
    return runs
