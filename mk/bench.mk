# Benchmarks: run on demand (`make bench`, as root), never in `make test`; lint-bench is in `make lint`.
# `make bench SIZE=1G FS=ext4,xfs JOBS=16 SOURCE_MBPS=125 SOURCE_IOPS=3000` (defaults: 2G,
# ext4,xfs,ntfs, the program's own --jobs, no cap on the source's reads). Results: out/bench/.
.PHONY: bench lint-bench test-bench
lint-bench: setup
	$(VENV)/bin/ruff check bench
	$(VENV)/bin/ruff format --check bench
	$(VENV)/bin/mypy --strict --python-version 3.11 bench

# Unit tests of the bench's own parsers and arithmetic (no root, no loop devices).
test-bench: setup
	$(PY) -m pytest -q bench/tests

bench: setup test-bench
	$(PY) -m bench --size $(or $(SIZE),2G) --fs $(or $(FS),ext4,xfs,ntfs) \
	  $(if $(JOBS),--jobs $(JOBS)) $(if $(SOURCE_MBPS),--source-mbps $(SOURCE_MBPS)) \
	  $(if $(SOURCE_IOPS),--source-iops $(SOURCE_IOPS)) --out out/bench
