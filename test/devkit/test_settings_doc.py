"""devkit.docs: docs/deploy.md's settings table is contract/settings.json, key by key."""

from __future__ import annotations

import json

from devkit import docs


def test_every_setting_is_a_row_with_its_bounds_and_no_placeholder_left() -> None:
    settings = json.loads((docs.CONTRACT / "settings.json").read_text())["settings"]
    table = docs.settings_table()
    rows = table.splitlines()[2:]
    assert len(rows) == len(settings)
    for (key, spec), row in zip(settings.items(), rows, strict=True):
        first = f"`{key}Seconds` / `{key}MaxAttempts`" if spec["kind"] == "pollLoop" else f"`{key}`"
        assert row.startswith(f"| {first} |")
    assert "{" not in table
    assert "| `sourceVolumeIops` | `16000` | 3,000\N{EN DASH}80,000 IOPS |" in table
    assert "up to 6 hours by default" in table  # sourcePoll: 60 s x 360


def test_a_bound_may_be_a_number_or_a_limit_name() -> None:
    assert docs.setting_bound(1) == 1
    assert docs.setting_bound("gp3MaxSizeGiB") == 65536


def test_durations_read_in_the_largest_whole_unit() -> None:
    assert [docs.duration(s) for s in (21600, 600, 3660, 90, 3600)] == [
        "6 hours",
        "10 minutes",
        "61 minutes",
        "90 seconds",
        "1 hour",
    ]
