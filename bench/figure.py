"""An SVG of written 512 KiB chunks, source vs each target, like seed 000's figures A-C."""

from __future__ import annotations

from html import escape

COLUMNS = 64
MAX_CELLS = 64 * 64  # larger volumes put several chunks in one cell, shaded by how many are set
CELL = 4
GAP = 24
TITLE = 30
COLOURS = {"source": "#d9480f", "bound": "#2b8a3e", "target": "#1c7ed6"}

# (panel title, colour key, set of chunk indices)
Panel = tuple[str, str, set[int]]


def cell_fractions(chunks: set[int], chunk_count: int) -> list[float]:
    per_cell = max(1, -(-chunk_count // MAX_CELLS))
    cells = -(-chunk_count // per_cell)
    counts = [0] * cells
    for chunk in chunks:
        if 0 <= chunk < chunk_count:
            counts[chunk // per_cell] += 1
    sizes = [min(per_cell, chunk_count - i * per_cell) for i in range(cells)]
    return [count / size for count, size in zip(counts, sizes, strict=True)]


def _panel(x: int, y: int, title: str, colour: str, fractions: list[float]) -> list[str]:
    parts = [f'<text x="{x}" y="{y - 6}" font-size="10">{escape(title)}</text>']
    rows = -(-len(fractions) // COLUMNS)
    parts.append(
        f'<rect x="{x}" y="{y}" width="{COLUMNS * CELL}" height="{rows * CELL}" '
        'fill="#f1f3f5" stroke="#adb5bd" stroke-width="0.5"/>'
    )
    # One rect per run of equally shaded cells in a row keeps the file small.
    for row in range(rows):
        cells = fractions[row * COLUMNS : (row + 1) * COLUMNS]
        col = 0
        while col < len(cells):
            end = col
            while end < len(cells) and cells[end] == cells[col]:
                end += 1
            if cells[col] > 0:
                parts.append(
                    f'<rect x="{x + col * CELL}" y="{y + row * CELL}" width="{(end - col) * CELL}" '
                    f'height="{CELL}" fill="{colour}" fill-opacity="{max(cells[col], 0.15):.2f}"/>'
                )
            col = end
    return parts


def render(rows: list[tuple[str, list[Panel]]], chunk_count: int, caption: str) -> str:
    """One row of panels per filesystem; every panel is the whole volume, chunk 0 top left."""
    grid_rows = -(-len(cell_fractions(set(), chunk_count)) // COLUMNS)
    panel_w, panel_h = COLUMNS * CELL, grid_rows * CELL
    most = max((len(panels) for _, panels in rows), default=0)
    width = GAP + most * (panel_w + GAP)
    height = TITLE + len(rows) * (panel_h + GAP + 30) + 10
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        'font-family="sans-serif">',
        f'<text x="{GAP}" y="18" font-size="12">{escape(caption)}</text>',
    ]
    y = TITLE + 30
    for fs, panels in rows:
        parts.append(
            f'<text x="4" y="{y - 20}" font-size="12" font-weight="bold">{escape(fs)}</text>'
        )
        for i, (title, key, chunks) in enumerate(panels):
            x = GAP + i * (panel_w + GAP)
            label = f"{title}: {len(chunks)}"
            parts += _panel(x, y, label, COLOURS[key], cell_fractions(chunks, chunk_count))
        y += panel_h + GAP + 30
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
