# The boot proof's negatives (test/boot, issue #12): a real Debian disk (devkit/debian) with its
# BIOS-boot partition or ESP punched out does not boot in QEMU (TCG, devkit/qemu_boot.py). The
# positive proof, the workflow's new AMI of that disk booting BIOS and UEFI, is the twin's
# (test/twin/test_debian_boot.py). Part of `make test`: needs root, the Debian mirror apt uses once
# (the cache lives in out/cache/debian-bookworm/; `make clean` or `python -m devkit.debian
# --refresh` rebuilds it) and about 1 min warm.
# devkit/debian and devkit/qemu_boot.py are linted with the rest of devkit/ (lint-devkit).
.PHONY: lint-boot test-boot
lint-boot: setup
	$(VENV)/bin/ruff check test/boot
	$(VENV)/bin/ruff format --check test/boot
	$(VENV)/bin/mypy --strict --python-version 3.11 test/boot

test-boot: setup
	$(PYTEST) -s test/boot
