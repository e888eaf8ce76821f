# Targets of the dataplane area: the sparsecopy program (ssm-documents/sparsecopy) and its tests.
# The program runs on Amazon Linux 2023's python3 (3.9): ruff checks it with target py39
# (pyproject.toml); mypy 2.x cannot target 3.9 any more, so it checks it as 3.10, vermin checks that
# no standard-library name newer than 3.9 is used, and a test parses every module with the 3.9
# grammar (test/dataplane/test_units.py).
include mk/devkit.mk
.PHONY: lint-dataplane test-dataplane corpus
DATAPLANE_PATHS := ssm-documents/sparsecopy test/dataplane
lint-dataplane: setup lint-devkit
	$(VENV)/bin/ruff check $(DATAPLANE_PATHS)
	$(VENV)/bin/ruff format --check $(DATAPLANE_PATHS)
	$(VENV)/bin/mypy --python-version 3.10 --strict ssm-documents/sparsecopy
	$(VENV)/bin/vermin --no-tips --violations -t=3.9- --eval-annotations ssm-documents/sparsecopy
	MYPYPATH=ssm-documents $(VENV)/bin/mypy --python-version 3.11 --ignore-missing-imports \
	  --check-untyped-defs test/dataplane
# Real filesystems on loop devices: needs root (as in CI); TIER=unit: the pure tests only.
# In parallel workers: the tests wait on loop devices and mkfs far more than they compute, and each
# works on files under its own tmp_path (loop devices are taken with `losetup --find` and released
# by their owner only: devkit/loop.py).
test-dataplane: setup
	$(PYTEST) $(XDIST) test/dataplane
# e2fsprogs' whole regression corpus (fetched from its Debian source package into out/cache, once)
# through `sparsecopy copy`, each copy judged by e2fsck and debugfs (devkit/e2fs_corpus.py); prints
# the table clean/corrupt x pass/fallback/refused and the time. test-dataplane runs a part of it.
corpus: setup
	$(PY) -m devkit.e2fs_corpus
