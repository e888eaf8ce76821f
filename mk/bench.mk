# Benchmarks: run on demand (`make bench`, as root), never in `make test`; lint-bench is in `make lint`.
# `make bench SIZE=1G BENCH_FS=ext4,xfs BENCH_DISKS=empty,lvm BENCH_REPEAT=2 BENCH_JOBS=16
#  BENCH_SOURCE_MBPS=125 BENCH_SOURCE_IOPS=3000` (defaults: 2G, ext4,xfs,ntfs, all other disks
# (empty,mixed,lvm,stale-itable,zeros-ext4,zeros-xfs,zeros-ntfs; none for none), one run per method, the program's own --jobs,
# no cap on the source's reads; BENCH_METHODS=seed-bs1M,allocated,allocated-blocks runs only those,
# the targets needing the others are then missed). SIZE >= 256M is for developing the bench (mkfs.xfs wants 300M).
# Results: out/bench/ (BENCH_OUT=DIR to change).
# `make bench-direct` (root: loop devices; BENCH_DIRECT_PATHS=read,direct without root): the same
# data written as a snapshot into a local stand-in of the EBS direct APIs (in its own process,
# BENCH_LATENCY_MS per request, at most BENCH_CONCURRENCY requests in flight) by `sparsecopy
# put-snapshot --jobs BENCH_PUT_JOBS` and `sparsecopy job --target snapshot --jobs BENCH_JOB_JOBS`,
# and copied to a loop device; BENCH_PROGRAM_REV=HEAD runs sparsecopy as committed. Results in
# out/bench-direct/ (docs/benchmark.md "Direct snapshot write vs target volume").
.PHONY: bench bench-direct lint-bench test-bench
# A variable, because a comma list inside $(or ...) would be split into arguments. (FS is the
# twin's variable, hence BENCH_FS.)
BENCH_FILESYSTEMS := ext4,xfs,ntfs
BENCH_OTHER_DISKS := empty,mixed,lvm,stale-itable,zeros-ext4,zeros-xfs,zeros-ntfs
BENCH_DIRECT_LATENCIES := 100,20,0
BENCH_DIRECT_JOBS := 100,32
BENCH_DIRECT_ALL_PATHS := read,block,direct,job
BENCH_DIRECT_JOB_JOBS := 16

lint-bench: setup
	$(VENV)/bin/ruff check bench test/bench
	$(VENV)/bin/ruff format --check bench test/bench
	$(VENV)/bin/mypy --strict --python-version 3.11 bench test/bench

# The bench's own parsers and arithmetic, and (needs_root) its loop devices, cgroup throttling and
# direct-write runs.
test-bench: setup
	$(PYTEST) test/bench

bench: setup test-bench
	$(PY) -m bench --size $(or $(SIZE),2G) --fs $(or $(BENCH_FS),$(BENCH_FILESYSTEMS)) \
	  --disks $(or $(BENCH_DISKS),$(BENCH_OTHER_DISKS)) --repeat $(or $(BENCH_REPEAT),1) \
	  $(if $(BENCH_JOBS),--jobs $(BENCH_JOBS)) $(if $(BENCH_SOURCE_MBPS),--source-mbps $(BENCH_SOURCE_MBPS)) \
	  $(if $(BENCH_SOURCE_IOPS),--source-iops $(BENCH_SOURCE_IOPS)) $(if $(BENCH_METHODS),--methods $(BENCH_METHODS)) \
	  --out $(or $(BENCH_OUT),out/bench)

bench-direct: setup
	$(PY) -m bench.direct_write --size $(or $(SIZE),5G) --data $(or $(BENCH_DATA),2G) \
	  --latency-ms $(or $(BENCH_LATENCY_MS),$(BENCH_DIRECT_LATENCIES)) --max-concurrency $(or $(BENCH_CONCURRENCY),100) \
	  --jobs $(or $(BENCH_PUT_JOBS),$(BENCH_DIRECT_JOBS)) \
	  --job-jobs $(or $(BENCH_JOB_JOBS),$(BENCH_DIRECT_JOB_JOBS)) --paths $(or $(BENCH_DIRECT_PATHS),$(BENCH_DIRECT_ALL_PATHS)) \
	  --repeat $(or $(BENCH_REPEAT),1) $(if $(BENCH_PROGRAM_REV),--program-rev $(BENCH_PROGRAM_REV)) \
	  --out $(or $(BENCH_OUT),out/bench-direct)
