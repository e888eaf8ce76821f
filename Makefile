# `make test` and `make demo` do their own set-up from a fresh clone (apt, npm ci, project venv).
# Each area keeps its targets in mk/<area>.mk: lambdas, cdk, dataplane, twin, bench.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps

.PHONY: setup test check lint lint-docs docs demo bench clean
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

# Generated Markdown blocks match contract/ and the code (devkit/docs.py), every relative link
# resolves, and no function of product code is over 60 lines. devkit/ itself is linted (ruff, mypy
# --strict) by lint-devkit (mk/devkit.mk, run by lint-dataplane).
# Renderers import the task Lambdas' package (compactor) from lambdas/, as Lambda does from its code root.
DOCS := PYTHONPATH=lambdas $(PY) -m devkit.docs
lint-docs: setup
	$(DOCS) --check
	$(PY) -m devkit.links
	$(PY) -m devkit.function_length

# Rewrites every generated block (tables from contract/*.json, the size table, the workflow table).
docs: setup
	$(DOCS)

# `make test` (CI, .ci/run): everything, from the set-up to the real disks, the QEMU boots and the
# twin; `make check`: lint and the unit-level tests of every area (TIER=unit), for the inner loop.
# Each target runs even when an earlier one failed; the run fails if any did, and ends with each
# target's wall time and every skipped test (devkit/test_report.py). docs/testing.md: the numbers.
TEST_TARGETS := setup lint test-lambdas test-cdk test-devkit test-dataplane test-bench test-client \
  test-boot test-twin
CHECK_TARGETS := setup lint test-lambdas test-cdk test-devkit test-dataplane test-bench test-client
test:
	$(call run_targets,$(TEST_TARGETS),,test)
check:
	$(call run_targets,$(CHECK_TARGETS),TIER=unit,check)

define run_targets
	@rm -rf $(REPORTS) && mkdir -p $(REPORTS); failed=""; \
	for t in $(1); do \
	  echo "==> make $$t $(2)"; start=$$(date +%s); rc=0; \
	  $(MAKE) --no-print-directory $$t $(2) || rc=$$?; \
	  printf '%s\t%s\t%s\n' "$$t" "$$rc" "$$(( $$(date +%s) - start ))" >> $(REPORTS)/times.tsv; \
	  [ "$$rc" -eq 0 ] || failed="$$failed $$t"; \
	done; \
	$(PY) -m devkit.test_report $(REPORTS) || true; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi; \
	echo "all $(3) targets passed"
endef

clean:
	rm -rf cdk.out out $(STAMPS)
