"""The before/after block picture: one cell per 512 KiB block, dark = written (stored in the
snapshot, fetched from S3 on first read), light = never written."""

from __future__ import annotations

from html import escape

CELL = 5
COLUMNS = 64


def _panel(title: str, chunks: set[int], total: int, x0: int, color: str) -> list[str]:
    rows = (total + COLUMNS - 1) // COLUMNS
    parts = [
        f'<text x="{x0}" y="18" font-size="13" font-family="sans-serif">{escape(title)}</text>',
        f'<rect x="{x0}" y="26" width="{COLUMNS * CELL}" height="{rows * CELL}" fill="#eef1f4"/>',
    ]
    for index in sorted(chunks):
        if index >= total:
            continue
        row, col = divmod(index, COLUMNS)
        parts.append(
            f'<rect x="{x0 + col * CELL}" y="{26 + row * CELL}" '
            f'width="{CELL}" height="{CELL}" fill="{color}"/>'
        )
    return parts


def block_picture(panels: list[tuple[str, set[int], int]]) -> str:
    """panels: (title, written chunk indexes, chunks in the volume)."""
    width = len(panels) * (COLUMNS * CELL + 30) + 10
    height = max((total + COLUMNS - 1) // COLUMNS for _, _, total in panels) * CELL + 60
    body: list[str] = []
    colors = ("#c0392b", "#1e8449", "#1f618d", "#7d3c98")
    for i, (title, chunks, total) in enumerate(panels):
        body += _panel(title, chunks, total, 10 + i * (COLUMNS * CELL + 30), colors[i % 4])
    legend = (
        f'<text x="10" y="{height - 10}" font-size="11" font-family="sans-serif">'
        "one cell = one 512 KiB EBS block; coloured = written (stored in the snapshot), "
        "grey = never written</text>"
    )
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">' + "".join(body) + legend + "</svg>\n"
    )
