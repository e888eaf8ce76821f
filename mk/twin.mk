# Targets of the twin area: the local twin (twin/), its tests (test/twin) and `make demo`.
# The twin synthesizes the stack into its own directory so it never races other users of cdk.out.
.PHONY: lint-twin test-twin demo twin-synth sweep sweep-disks twin-record
TWIN_PATHS := twin test/twin
TWIN_CDK_OUT := out/twin/cdk.out
FS ?= ext4
INPUT ?= snapshot
# TARGET=snapshot|volume: the execution input's target (empty: none given, the workflow's default,
# snapshot: the new snapshot written with the EBS direct APIs; volume: a target volume + CreateSnapshot)
TARGET ?=
TRIGGER ?= api
FAULT ?= none
# OS=debian (INPUT=ami): a real Debian root, booted in QEMU after the run; BOOT_MODE=uefi for UEFI
OS ?= none
BOOT_MODE ?=
# BATCH=N: a batch of N items (N-1 snapshots + one missing) through the batch workflow (twin/batch.py)
BATCH ?= 0
# DRY_RUN=1: the execution input says "dryRun": true (an estimate; no snapshot is made)
DRY_RUN ?= 0
# DISKLESS=1: no disks, the data plane's disk planning replayed from twin/data_plane_recording.json
DISKLESS ?= 0
# make sweep STATES="Launch transfer instance,Report" KINDS=error,abort WORKERS=2
STATES ?=
KINDS ?=
WORKERS ?= 2

lint-twin: setup
	$(VENV)/bin/ruff check $(TWIN_PATHS)
	$(VENV)/bin/ruff format --check $(TWIN_PATHS)
	$(VENV)/bin/mypy --python-version 3.11 --ignore-missing-imports --check-untyped-defs twin
	for f in twin/runner/*.mjs; do node --check $$f || exit 1; done

twin-synth: setup
	@mkdir -p $(dir $(TWIN_CDK_OUT))
	npx cdk synth --quiet -o $(TWIN_CDK_OUT) > $(dir $(TWIN_CDK_OUT))synth.log 2>&1 \
	  || { cat $(dir $(TWIN_CDK_OUT))synth.log; echo "twin: cdk synth failed (log above)"; exit 1; }

# End-to-end and fault scenarios on loop devices: needs root (as in CI). Each test has its own
# emulator, files and loop devices, and a scenario mostly waits on emulated AWS time, so four
# workers share the two cores (with three, the last minutes of `make test`, when the twin's lane
# runs alone, kept the machine 45-75 % busy). The longest tests start first: test/twin/conftest.py.
# Each worker appends which statement of which role allowed the calls of each run to
# TWIN_IAM_USAGE (twin/iam/usage.py); after the suite the parts are merged into the IAM report,
# which fails on any denial and on any role's statement that no run used.
TWIN_XDIST ?= -n 4 --dist worksteal
TWIN_IAM_USAGE := out/twin/iam-usage
test-twin: twin-synth
	rm -rf $(TWIN_IAM_USAGE)
	TWIN_IAM_USAGE=$(CURDIR)/$(TWIN_IAM_USAGE) TWIN_CDK_OUT=$(CURDIR)/$(TWIN_CDK_OUT) \
	  $(PYTEST) $(TWIN_XDIST) test/twin
	$(PY) -m twin.iam.usage $(TWIN_IAM_USAGE) --report out/twin/iam-report.json

demo: twin-synth
	$(PY) -m twin.demo --cdk-out $(TWIN_CDK_OUT) --out out/demo \
	  --fs $(FS) --input $(INPUT) --target "$(TARGET)" --trigger $(TRIGGER) --fault "$(FAULT)" \
	  --os "$(OS)" --boot-mode "$(BOOT_MODE)" --batch $(BATCH) $(if $(filter-out 0,$(DRY_RUN)),--dry-run) \
	  $(if $(filter-out 0,$(DISKLESS)),--diskless)

# Every Task state x every fault kind that applies (docs/sweep.md), diskless: each case's data plane
# plans its disks from twin/data_plane_recording.json (docs/twin.md, "Diskless"); no root needed.
sweep: twin-synth
	$(PY) -m twin.sweep --diskless --cdk-out $(TWIN_CDK_OUT) --out out/sweep --workers $(WORKERS) \
	  --states "$(STATES)" --kinds "$(KINDS)" $(if $(STATES)$(KINDS),,--doc docs/sweep.md)

# The same on real disks (loop devices, mounts): needs root, ~16 min on 2 idle cores.
sweep-disks: twin-synth
	$(PY) -m twin.sweep --cdk-out $(TWIN_CDK_OUT) --out out/sweep-disks --workers $(WORKERS) \
	  --states "$(STATES)" --kinds "$(KINDS)" $(if $(STATES)$(KINDS),,--doc docs/sweep.md)

# Record the real data-plane runs the diskless twin replays (needs root); again whenever the data
# plane's summary changes (test_diskless.py and test_scenarios.py fail until then).
twin-record: twin-synth
	$(PY) -m twin.record --cdk-out $(TWIN_CDK_OUT)
