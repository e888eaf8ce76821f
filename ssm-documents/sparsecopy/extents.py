"""Byte ranges as sorted lists of ``(start, length)`` tuples."""

from collections.abc import Iterable

Extent = tuple[int, int]
Extents = list[Extent]


def normalize(extents: Iterable[Extent], gap: int = 0) -> Extents:
    """Sort, drop empty ranges and merge ranges that overlap or lie at most ``gap`` bytes apart."""
    out: Extents = []
    for start, length in sorted(e for e in extents if e[1] > 0):
        if out and start <= out[-1][0] + out[-1][1] + gap:
            prev_start, prev_len = out[-1]
            out[-1] = (prev_start, max(prev_len, start + length - prev_start))
        else:
            out.append((start, length))
    return out


def total(extents: Iterable[Extent]) -> int:
    return sum(length for _, length in extents)


def shift(extents: Iterable[Extent], by: int) -> Extents:
    return [(start + by, length) for start, length in extents]


def complement(extents: Iterable[Extent], start: int, end: int) -> Extents:
    """The parts of ``[start, end)`` that no extent covers."""
    out: Extents = []
    pos = start
    for s, length in normalize(extents):
        if s > pos:
            out.append((pos, min(s, end) - pos))
        pos = max(pos, s + length)
        if pos >= end:
            break
    if pos < end:
        out.append((pos, end - pos))
    return [e for e in out if e[1] > 0]


def clip(extents: Iterable[Extent], start: int, end: int) -> Extents:
    """The parts of the extents inside ``[start, end)``."""
    out: Extents = []
    for s, length in extents:
        lo, hi = max(s, start), min(s + length, end)
        if hi > lo:
            out.append((lo, hi - lo))
    return out


def align(extents: Iterable[Extent], unit: int, limit: int) -> Extents:
    """Widen every extent to ``unit`` boundaries (never past ``limit``), then merge."""
    widened = []
    for start, length in extents:
        lo = start - start % unit
        hi = min(-(-(start + length) // unit) * unit, limit)
        widened.append((lo, hi - lo))
    return normalize(widened)


def split(extents: Iterable[Extent], size: int) -> Extents:
    """Cut extents into pieces of at most ``size`` bytes that start on ``size`` boundaries."""
    out: Extents = []
    for start, length in extents:
        pos, end = start, start + length
        while pos < end:
            stop = min((pos // size + 1) * size, end)
            out.append((pos, stop - pos))
            pos = stop
    return out


def intersect(extents: Iterable[Extent], other: Iterable[Extent]) -> Extents:
    """The bytes covered by both ``extents`` and ``other``, sorted and merged."""
    a, b = normalize(extents), normalize(other)
    out: Extents = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo = max(a[i][0], b[j][0])
        a_end, b_end = a[i][0] + a[i][1], b[j][0] + b[j][1]
        hi = min(a_end, b_end)
        if hi > lo:
            out.append((lo, hi - lo))
        if a_end <= b_end:
            i += 1
        else:
            j += 1
    return normalize(out)
