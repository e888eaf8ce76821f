# Benchmarks: run on demand (`make bench`, as root), never in `make test`; lint-bench is in `make lint`.
# `make bench SIZE=1G BENCH_FS=ext4,xfs BENCH_DISKS=empty,lvm BENCH_REPEAT=2 BENCH_JOBS=16
#  BENCH_SOURCE_MBPS=125 BENCH_SOURCE_IOPS=3000` (defaults: 2G, ext4,xfs,ntfs, all other disks
# (empty,mixed,lvm,stale-itable; none for none), one run per method, the program's own --jobs,
# no cap on the source's reads). SIZE >= 256M is for developing the bench (mkfs.xfs wants 300M).
# Results: out/bench/ (BENCH_OUT=DIR to change).
.PHONY: bench lint-bench test-bench
# A variable, because a comma list inside $(or ...) would be split into arguments. (FS is the
# twin's variable, hence BENCH_FS.)
BENCH_FILESYSTEMS := ext4,xfs,ntfs
BENCH_OTHER_DISKS := empty,mixed,lvm,stale-itable

lint-bench: setup
	$(VENV)/bin/ruff check bench test/bench
	$(VENV)/bin/ruff format --check bench test/bench
	$(VENV)/bin/mypy --strict --python-version 3.11 bench test/bench

# Unit tests of the bench's own parsers and arithmetic (no root, no loop devices).
test-bench: setup
	$(PY) -m pytest -q test/bench

bench: setup test-bench
	$(PY) -m bench --size $(or $(SIZE),2G) --fs $(or $(BENCH_FS),$(BENCH_FILESYSTEMS)) \
	  --disks $(or $(BENCH_DISKS),$(BENCH_OTHER_DISKS)) --repeat $(or $(BENCH_REPEAT),1) \
	  $(if $(BENCH_JOBS),--jobs $(BENCH_JOBS)) $(if $(BENCH_SOURCE_MBPS),--source-mbps $(BENCH_SOURCE_MBPS)) \
	  $(if $(BENCH_SOURCE_IOPS),--source-iops $(BENCH_SOURCE_IOPS)) --out $(or $(BENCH_OUT),out/bench)
