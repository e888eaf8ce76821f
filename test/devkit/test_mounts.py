import subprocess
import time
from pathlib import Path

from devkit.mounts import fuse_daemons


def test_fuse_daemons_finds_the_ntfs3g_process_of_a_mount_point(tmp_path: Path) -> None:
    mount_dir = tmp_path / "mnt"
    mount_dir.mkdir()
    # a shell named like the daemon, with the mount point among its arguments (as $0)
    fake = subprocess.Popen(
        ["/sbin/mount.ntfs-3g", "-c", "sleep 60; :", str(mount_dir)], executable="/bin/sh"
    )
    cmdline = Path(f"/proc/{fake.pid}/cmdline")
    try:
        # Popen returns mid-exec; the new argument list shows up a moment later.
        for _ in range(200):
            if cmdline.read_bytes():
                break
            time.sleep(0.01)
        # the shell forks a child for sleep, which has the same arguments until it execs
        for _ in range(200):
            if fuse_daemons(mount_dir) == [fake.pid]:
                break
            time.sleep(0.01)
        assert fuse_daemons(mount_dir) == [fake.pid]
        assert fuse_daemons(tmp_path) == []
    finally:
        fake.kill()
        fake.wait()
    assert fuse_daemons(mount_dir) == []
