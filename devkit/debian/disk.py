"""The hybrid GPT disk of the boot proof, built from the cached root tarball (no mirror needed):
1 BIOS-boot (1 MiB, GRUB's core.img) | 2 ESP (100 MiB FAT32, EFI/BOOT/BOOTX64.EFI) | 3 ext4 root.
The same disk boots through SeaBIOS (GRUB i386-pc) and OVMF (a standalone GRUB x86_64-efi); both
read one hand-written /boot/grub/grub.cfg that starts the kernel with the boot-check init."""

from __future__ import annotations

import secrets
import shutil
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

from devkit.commands import run
from devkit.disks.image import MIB, SECTOR, DiskImage
from devkit.disks.layout import BIOS_BOOT, EFI_SYSTEM, LINUX, make_gpt, mkfs, partition_mount

HERE = Path(__file__).resolve().parent
DISK_SIZE = 2048 * MIB
BIOS_PART, ESP_PART, ROOT_PART = 1, 2, 3
INIT = "/usr/local/sbin/boot-check"
# A standalone GRUB with only these modules (724 KiB); its embedded config finds the root by UUID.
EFI_MODULES = (
    "part_gpt ext2 fat search search_fs_uuid configfile normal linux echo serial terminal test "
    "gzio efi_gop all_video"
)


@dataclass(frozen=True)
class DebianDisk:
    """A built boot-proof disk: the image and the identities its boot configuration names."""

    image: DiskImage
    root_uuid: str
    esp_id: str  # the FAT volume id, as fstab writes it: XXXX-XXXX


def build_disk(path: Path, tarball: Path, size: int = DISK_SIZE) -> DebianDisk:
    """Build the disk at `path` (sparse, `size` bytes) from the root tree in `tarball`."""
    path.unlink(missing_ok=True)
    image = make_gpt(
        path, size, [(1, BIOS_BOOT, "none"), (100, EFI_SYSTEM, "vfat"), (0, LINUX, "ext4")]
    )
    disk = DebianDisk(
        image, str(uuid.uuid4()), f"{secrets.token_hex(2)}-{secrets.token_hex(2)}".upper()
    )
    esp = image.partition(ESP_PART)
    # On the image at an offset (in sectors, size in KiB): no loop device, no vfat driver needed.
    # -s 1: with bigger clusters 100 MiB has too few clusters for FAT32 and mtools refuses it.
    run("mkfs.fat", "-F", "32", "-s", "1", "-n", "EFI", "-i", disk.esp_id.replace("-", ""),
        "--offset", str(esp.start // SECTOR), str(path), str(esp.size // 1024))  # fmt: skip
    mkfs(image, ROOT_PART, "-U", disk.root_uuid, "-L", "root")
    with partition_mount(image, ROOT_PART) as root:
        run("tar", "--numeric-owner", "--xattrs", "--acls", "-I", "zstd", "-C", str(root),
            "-xf", str(tarball))  # fmt: skip
        write_config(root, disk)
        # GRUB reads the GPT of the image file itself and embeds core.img in the BIOS-boot
        # partition. It cannot tell that the mounted root (an offset loop) is partition 3, so it
        # embeds a search by UUID, but not part_gpt: without it the boot stops at grub rescue>.
        run("grub-install", "--target=i386-pc", f"--boot-directory={root / 'boot'}",
            "--modules=part_gpt ext2", str(path))  # fmt: skip
    install_efi_grub(disk)
    return disk


def write_config(root: Path, disk: DebianDisk) -> None:
    """fstab, hostname, the boot-check init and grub.cfg: none of them a conffile, so dpkg
    --verify in the guest stays clean."""
    (root / "etc/fstab").write_text(
        f"UUID={disk.root_uuid} / ext4 defaults,errors=remount-ro 0 1\n"
        f"UUID={disk.esp_id} /boot/efi vfat umask=0077 0 2\n"
    )
    (root / "boot/efi").mkdir(parents=True, exist_ok=True)
    (root / "etc/hostname").write_text("bootproof\n")
    init = root / INIT.lstrip("/")
    shutil.copyfile(HERE / "boot-check", init)
    init.chmod(0o755)
    (root / "boot/grub").mkdir(parents=True, exist_ok=True)
    (root / "boot/grub/grub.cfg").write_text(grub_cfg(disk.root_uuid))


def grub_cfg(root_uuid: str) -> str:
    """The one GRUB menu both firmwares reach: serial console, no timeout, the kernel and initrd
    through the symlinks the kernel package keeps in /."""
    return f"""serial --unit=0 --speed=115200
terminal_input serial console
terminal_output serial console
set timeout=0
set default=0
insmod part_gpt
insmod ext2
search --no-floppy --fs-uuid --set=root {root_uuid}
menuentry 'Debian boot proof' {{
  echo 'GRUB: loading kernel'
  linux /vmlinuz root=UUID={root_uuid} ro console=ttyS0,115200 init={INIT}
  initrd /initrd.img
}}
"""


def install_efi_grub(disk: DebianDisk) -> None:
    """A standalone GRUB EFI image as the ESP's removable-media path (what OVMF with empty
    NVRAM boots) and as EFI/debian/grubx64.efi. Its prefix stays (memdisk): a prefix on the
    disk would make GRUB look for its modules there."""
    embed = (
        "insmod part_gpt\ninsmod ext2\n"
        f"search --no-floppy --fs-uuid --set=root {disk.root_uuid}\n"
        "configfile ($root)/boot/grub/grub.cfg\n"
    )
    esp = f"{disk.image.path}@@{disk.image.partition(ESP_PART).start}"
    with tempfile.TemporaryDirectory(prefix="efi-grub-") as tmp:
        (Path(tmp) / "embed.cfg").write_text(embed)
        efi = str(Path(tmp) / "BOOTX64.EFI")
        run("grub-mkstandalone", "-O", "x86_64-efi", "-o", efi,
            f"--install-modules={EFI_MODULES}", "--locales=", "--fonts=", "--themes=",
            f"boot/grub/grub.cfg={tmp}/embed.cfg")  # fmt: skip
        run("mmd", "-i", esp, "::/EFI", "::/EFI/BOOT", "::/EFI/debian")
        run("mcopy", "-i", esp, efi, "::/EFI/BOOT/BOOTX64.EFI")
        run("mcopy", "-i", esp, efi, "::/EFI/debian/grubx64.efi")
