import time
from pathlib import Path

import pytest

from devkit.loop import LoopDevices, LoopError, kernel_loops, loop_device, loops_backed_by, serves

needs_root = pytest.mark.needs_root


def _backing(tmp_path: Path) -> Path:
    backing = tmp_path / "disk.img"
    with backing.open("wb") as f:
        f.truncate(1 << 20)
    return backing


def test_loop_devices_refuse_to_detach_a_device_they_did_not_attach() -> None:
    with pytest.raises(LoopError, match="refusing to detach /dev/loop0: the twin did not"):
        LoopDevices("the twin").detach("/dev/loop0")


@needs_root
def test_loop_device_serves_its_slice_and_is_gone_after(tmp_path: Path) -> None:
    backing = _backing(tmp_path)
    with loop_device(backing, 4096, 8192, read_only=True) as device:
        assert serves(device, backing, 4096)
        assert not serves(device, backing, 0)
        assert Path(f"/sys/block/{Path(device).name}/size").read_text().strip() == "16"
    assert not serves(device, backing, 4096)


@needs_root
def test_a_device_whose_backing_file_was_deleted_is_still_detached(tmp_path: Path) -> None:
    """A deleted backing file reads "(deleted)" in sysfs; the device still holds it and is
    still ours: a detach that took it for someone else's left it attached (CI saw two)."""
    image = tmp_path / "disk.img"
    image.write_bytes(bytes(1 << 20))
    with loop_device(image) as device:
        image.unlink()
        assert serves(device, image)
    assert not any(str(image) in backing for backing in kernel_loops().values())


@pytest.mark.parametrize("wait", [True, False])
@needs_root
def test_loop_devices_release_stacked_devices_and_detach_their_own(
    tmp_path: Path, wait: bool
) -> None:
    loops = LoopDevices("this test", wait_until_free=wait)
    outer = loops.attach(_backing(tmp_path))
    try:
        stacked = loops.attach(Path(outer), 4096, 4096)
        loops.attached.pop(stacked)  # a program made it: not ours to detach by name
        assert loops_backed_by([outer]) == [stacked]
        assert loops.kernel_leftovers(tmp_path) == sorted([outer, stacked])
        assert loops.release_stacked([outer]) == [stacked]
    finally:
        assert loops.detach_all() == []
    assert loops.attached == {}
    # Without waiting, a detach only marks the device: the kernel frees it once the last opener
    # (another lane's blkid, say) closes it, so poll for that rather than race it.
    deadline = time.monotonic() + 10
    while str(tmp_path) in kernel_loops().get(outer, "") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not kernel_loops().get(outer, "").startswith(str(tmp_path))
