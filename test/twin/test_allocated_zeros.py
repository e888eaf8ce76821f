"""Issue #19 end to end: the workflow on disks whose filesystems need blocks of written zeros
(devkit/disks/zeros.py), each new snapshot checked on its restores (encrypted: absent blocks
read as random bytes; unencrypted: as zeros) and against the block rule. A copy that drops an
all-zero block a file or the XFS log needs fails here on the encrypted restore (with sparsecopy
before the fix: the swap file and the zero pages differ, the fresh XFS does not mount).

One scenario per disk and target, encrypted and unencrypted sources mixed (~2 min each here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from twin.scenario import Options, run

pytestmark = pytest.mark.needs_root

CASES = [
    # (disk, target, source encrypted)
    ("ext4-zero-files", None, True),
    ("ext4-zero-files", "volume", False),
    ("xfs-fresh", "volume", True),
    ("ext4-zeroed-itables", None, False),
]


@pytest.mark.parametrize(("fs", "target", "encrypted"), CASES)
def test_allocated_zeros_survive_every_restore(
    cdk_out: Path, tmp_path: Path, fs: str, target: str | None, encrypted: bool
) -> None:
    report = run(
        Options(cdk_out=cdk_out, out_dir=tmp_path / "out", picture=False, fs=fs, target=target,
                encrypted=encrypted)
    )  # fmt: skip
    assert report["execution_status"] == "SUCCEEDED", (report["error"], report["cause"])
    (row,) = report["verification"]
    new = row["newSnapshotId"]
    # the restores a user can make: encrypted always, unencrypted when the snapshot is
    want = [f"{new}: encrypted"] + ([] if encrypted else [f"{new}: unencrypted"])
    assert report["restores_checked"] == want
    for restore in row["restores"]:
        assert restore["problems"] == [], restore
        assert (restore["kmsKeyId"] is not None) == (restore["restore"] == "encrypted")
    assert report["files_verified"] is True and report["fsck_clean"] is True
    blocks: dict[str, Any] = row["blocks"]
    assert blocks["holds"] is True and report["blocks_exact"] is True, blocks
    assert blocks["file_blocks_held"] > 0  # files' blocks (FIEMAP) or the XFS log
    assert report["holds"] is True, report
