"""Where each volume of a job is attached: source i at /dev/sd[f+i], target i at /dev/sd[p+i]."""

from __future__ import annotations

SOURCE_FIRST_LETTER = "f"
TARGET_FIRST_LETTER = "p"


def source_device(index: int) -> str:
    return "/dev/sd" + chr(ord(SOURCE_FIRST_LETTER) + index)


def target_device(index: int) -> str:
    return "/dev/sd" + chr(ord(TARGET_FIRST_LETTER) + index)
