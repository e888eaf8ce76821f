"""A real Debian bookworm disk for the boot proof (issue #12): a debootstrap tree cached as a
tarball (cache), a hybrid BIOS + UEFI GPT disk booting through its own GRUB (disk), and the churn
plus crash-consistent copy taken while mounted, like an EBS snapshot of a running instance (dirt).
The disk is booted by devkit.qemu_boot; `python -m devkit.debian` builds all three."""
