# `make test` and `make demo` do their own set-up from a fresh clone (apt, npm ci, project venv).
# Each area keeps its targets in mk/<area>.mk: lambdas, cdk, dataplane, twin, bench.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps

.PHONY: setup test check lint lint-docs docs generate demo bench clean
# apt, npm and pip share nothing: run_lanes makes them side by side (-j4), each one's output whole;
# `make test` makes checkov's venv there too, while the set-up waits on the network.
setup: $(STAMPS)/apt $(STAMPS)/npm $(STAMPS)/venv

$(STAMPS)/apt: scripts/apt-packages.txt scripts/install-apt.sh
	bash scripts/install-apt.sh
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/npm: package.json package-lock.json
	npm ci --no-audit --no-fund
	@mkdir -p $(STAMPS) && touch $@

$(STAMPS)/venv: requirements-dev.txt constraints.txt client/pyproject.toml
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install --disable-pip-version-check -q -r requirements-dev.txt -c constraints.txt
	$(VENV)/bin/pip install --disable-pip-version-check -q -c constraints.txt -e client
	@mkdir -p $(STAMPS) && touch $@

# Every pytest target prints its 15 slowest tests and each failure, error and skip with its reason
# (-rfEs), and writes a JUnit report that the summary of `make test`/`make check` reads
# (devkit/test_report.py). TIER=unit (what `make check` passes) keeps to the tests that need no
# root, no loop device and no QEMU: the needs_root marker (devkit/pytest_ci.py) is the one line.
REPORTS := out/test-reports
PYTEST = $(PY) -m pytest -q -rfEs --durations=15 --junitxml=$(REPORTS)/$@.xml \
  $(if $(filter unit,$(TIER)),-m "not needs_root")
# Parallel workers (pytest-xdist, one per core) for suites whose tests share nothing but files
# under their own tmp_path: moto runs in-process, each test has its own.
XDIST := -n auto

include mk/lambdas.mk mk/cdk.mk mk/dataplane.mk mk/twin.mk mk/bench.mk mk/boot.mk mk/client.mk

lint: setup lint-docs lint-lambdas lint-cdk lint-dataplane lint-twin lint-bench lint-boot lint-client

# Generated Markdown blocks (devkit/docs.py) and source files (devkit/generate.py) match contract/
# and the code, every relative link resolves, and no function of product code is over 60 lines. devkit/ itself is linted (ruff, mypy
# --strict) by lint-devkit (mk/devkit.mk, run by lint-dataplane).
# Renderers import the task Lambdas' package (compactor) from lambdas/, as Lambda does from its code root.
DOCS := PYTHONPATH=lambdas $(PY) -m devkit.docs
lint-docs: setup
	$(DOCS) --check
	$(GENERATE) --check
	$(PY) -m devkit.links
	$(PY) -m devkit.function_length

# Rewrites every generated block (tables from contract/*.json, the size table, the workflow table).
docs: setup
	$(DOCS)

# Rewrites every source file generated from contract/ (devkit/generate.py: compactor/models.py,
# the data plane's constants module sparsecopy/shared.py); lint-docs fails while one is stale.
GENERATE := $(PY) -m devkit.generate
generate: setup
	$(GENERATE)

# `make test` (CI, .ci/run): everything, from the set-up to the real disks, the QEMU boots and the
# twin; `make check`: lint and the unit-level tests of every area (TIER=unit), for the inner loop.
# Each target runs even when an earlier one failed; the run fails if any did, and ends with each
# target's wall time and every skipped test (devkit/test_report.py). docs/testing.md: the numbers.
# The targets run in lanes (devkit/run_targets.py): a lane's targets one after the other, the
# lanes side by side, each target's output printed whole when it ends. Most of the suite waits on
# the twin's emulated AWS, loop devices and QEMU, so the lanes overlap on two cores.
TEST_LANES := "lint test-lambdas test-cdk test-devkit test-bench test-client" \
  "test-dataplane test-boot" "test-twin"
CHECK_LANES := "lint test-devkit test-dataplane test-bench test-client" "test-lambdas test-cdk"
test:
	$(call run_lanes,$(TEST_LANES),,test,$(STAMPS)/checkov)
check:
	$(call run_lanes,$(CHECK_LANES),TIER=unit,check)

define run_lanes
	@rm -rf $(REPORTS) && mkdir -p $(REPORTS); rc=0; \
	echo "==> make setup"; start=$$(date +%s); \
	$(MAKE) --no-print-directory -j4 -Otarget setup $(4) || rc=$$?; \
	printf 'setup\t%s\t%s\n' "$$rc" "$$(( $$(date +%s) - start ))" >> $(REPORTS)/times.tsv; \
	if [ "$$rc" -eq 0 ]; then $(PY) -m devkit.run_targets --vars "$(2)" $(1) || rc=$$?; fi; \
	printf 'wall\t%s\t%s\n' "$$rc" "$$(( $$(date +%s) - start ))" >> $(REPORTS)/times.tsv; \
	$(PY) -m devkit.test_report $(REPORTS) || true; \
	if [ "$$rc" -ne 0 ]; then echo "FAILED (see above)"; exit 1; fi; \
	echo "all $(3) targets passed"
endef

clean:
	rm -rf cdk.out out $(STAMPS)
