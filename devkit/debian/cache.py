"""The Debian root tree (debootstrap minbase + kernel), cached as a zstd tarball, and the .debs the
churn installs: both fetched from the mirror once, under out/cache/debian-bookworm/, keyed by
the debootstrap arguments. Later builds need no network; `refresh=True` fetches again."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from devkit.commands import run

SUITE = "bookworm"
VARIANT = "minbase"
INCLUDE = ("linux-image-amd64", "initramfs-tools")
# Installed by the churn and partly purged again (python3-minimal pre-depends on
# python3.11-minimal).
CHURN_PACKAGES = ("python3-minimal", "nano", "less", "vim-tiny")
CACHE_ROOT = Path("out/cache/debian-bookworm")
FALLBACK_MIRROR = "http://deb.debian.org/debian"
HERE = Path(__file__).resolve().parent
SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))


def mirror(sources: tuple[Path, ...] = SOURCES) -> str:
    """The Debian mirror apt uses here (deb822 `URIs:` or a one-line `deb URL suite ...`)."""
    for path in sources:
        if not path.exists():
            continue
        text = path.read_text()
        for pattern in (r"^URIs:\s*(\S+)", r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+\S+"):
            for url in re.findall(pattern, text, flags=re.MULTILINE):
                if "security" not in url:
                    return str(url).rstrip("/")
    return FALLBACK_MIRROR


def cache_key(
    suite: str = SUITE, variant: str = VARIANT, include: tuple[str, ...] = INCLUDE
) -> str:
    """A short name for one set of debootstrap arguments (a new set gets a new cache)."""
    args = f"{suite} {variant} {','.join(include)} small-initrd"
    return f"{suite}-{variant}-{hashlib.sha256(args.encode()).hexdigest()[:12]}"


@contextlib.contextmanager
def building(cache: Path) -> Iterator[None]:
    """One builder of the cache at a time: `make test` runs the data plane's, the boot proof's
    and the twin's tests side by side, and each may be the first to need the tree."""
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{cache_key()}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def rootfs_tarball(cache: Path = CACHE_ROOT, *, refresh: bool = False) -> Path:
    """The tarball of the finished root tree; built with debootstrap when missing (~70 s)."""
    tarball = cache / f"{cache_key()}.tar.zst"
    if tarball.exists() and not refresh:
        return tarball
    with building(cache):
        if tarball.exists() and not refresh:
            return tarball  # another process built it while this one waited
        _build_tarball(cache, tarball)
    return tarball


def _build_tarball(cache: Path, tarball: Path) -> None:
    tree = Path(tempfile.mkdtemp(prefix="debootstrap-", dir=cache))
    try:
        run(
            "debootstrap",
            f"--variant={VARIANT}",
            f"--include={','.join(INCLUDE)}",
            SUITE,
            str(tree),
            mirror(),
            # no initrd from the kernel's postinst: small_initrd makes the only one (a full one
            # took 34 CPU-seconds of the ~150 the tree costs)
            env={"INITRD": "No"},
        )
        small_initrd(tree)
        # Keep the directories apt owns (lists/partial, archives/partial): dpkg --verify
        # reports them missing otherwise.
        for leftover in [
            *tree.glob("var/cache/apt/archives/*.deb"),
            *tree.glob("var/lib/apt/lists/*"),
        ]:
            if leftover.is_file():
                leftover.unlink()
        partial = tarball.with_suffix(".part")
        run("tar", "--numeric-owner", "--xattrs", "--acls", "-I", "zstd -T0 -3", "-C", str(tree),
            "-cf", str(partial), ".")  # fmt: skip
        partial.rename(tarball)
    finally:
        shutil.rmtree(tree, ignore_errors=True)


def small_initrd(tree: Path) -> None:
    """Create the initrd with MODULES=list plus a hook naming the modules a QEMU or EC2 guest
    needs: a 6 MiB initrd instead of 35 MiB, which GRUB loads seconds faster under TCG. Both
    files are unowned (a changed conffile would be a dpkg --verify problem)."""
    (tree / "etc/initramfs-tools/conf.d/boot-proof.conf").write_text("MODULES=list\n")
    hook = tree / "etc/initramfs-tools/hooks/boot-proof"
    shutil.copyfile(HERE / "initramfs-hook", hook)
    hook.chmod(0o755)
    run("mount", "--bind", "/proc", str(tree / "proc"))
    try:
        run("chroot", str(tree), "update-initramfs", "-c", "-k", "all")
        # /initrd.img, which GRUB's menu loads: the postinst that would have linked it was skipped
        for kernel in tree.glob("boot/vmlinuz-*"):
            version = kernel.name.removeprefix("vmlinuz-")
            run("chroot", str(tree), "linux-update-symlinks", "install", version,
                f"/boot/{kernel.name}")  # fmt: skip
    finally:
        run("umount", str(tree / "proc"))


def churn_debs(cache: Path = CACHE_ROOT, *, refresh: bool = False) -> Path:
    """A directory of the CHURN_PACKAGES .debs and their dependencies missing from the tree,
    downloaded with apt-get inside a throwaway chroot of the cached tree."""
    debs = cache / f"{cache_key()}-churn-debs"
    if debs.is_dir() and not refresh:
        return debs
    tarball = rootfs_tarball(cache)
    with building(cache):
        if not debs.is_dir() or refresh:
            _download_debs(tarball, cache, debs)
    return debs


def _download_debs(tarball: Path, cache: Path, debs: Path) -> None:
    chroot = Path(tempfile.mkdtemp(prefix="churn-chroot-", dir=cache))
    try:
        run("tar", "--numeric-owner", "-I", "zstd", "-C", str(chroot), "-xf", str(tarball))
        shutil.copyfile("/etc/resolv.conf", chroot / "etc/resolv.conf")
        run("chroot", str(chroot), "apt-get", "-q", "update")
        run("chroot", str(chroot), "apt-get", "-q", "install", "-y", "-d",
            "--no-install-recommends", *CHURN_PACKAGES)  # fmt: skip
        partial = debs.with_suffix(".part")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for deb in (chroot / "var/cache/apt/archives").glob("*.deb"):
            shutil.move(deb, partial / deb.name)
        shutil.rmtree(debs, ignore_errors=True)
        partial.rename(debs)
    finally:
        shutil.rmtree(chroot, ignore_errors=True)
