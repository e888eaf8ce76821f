# The boot proof of issue #12 (test/boot): a real Debian disk (devkit/debian) copied by sparsecopy
# boots BIOS and UEFI in QEMU (TCG, devkit/qemu_boot.py). Part of `make test`: needs root, the Debian
# mirror apt uses once (the cache lives in out/cache/debian-bookworm/; `make clean` or
# `python -m devkit.debian --refresh` rebuilds it) and about 2 min warm, 4 min cold.
# devkit/debian and devkit/qemu_boot.py are linted with the rest of devkit/ (lint-devkit).
.PHONY: lint-boot test-boot
lint-boot: setup
	$(VENV)/bin/ruff check test/boot
	$(VENV)/bin/ruff format --check test/boot
	$(VENV)/bin/mypy --strict --python-version 3.11 test/boot

test-boot: setup
	$(PYTEST) -s test/boot
