# `make test` and `make demo` do their own set-up from a fresh clone (apt, npm ci, project venv).
# Each area keeps its targets in mk/<area>.mk: lambdas, cdk, dataplane, twin, bench.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := test

VENV := .venv
PY := $(VENV)/bin/python
STAMPS := .stamps

.PHONY: setup test lint lint-docs docs demo bench clean
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

# Every test; each area's target runs even when an earlier one failed, and the run fails if any did.
test: setup
	@failed=""; \
	for t in lint test-lambdas test-cdk test-dataplane test-bench test-client test-boot test-twin; do \
	  echo "==> make $$t"; \
	  $(MAKE) --no-print-directory $$t || failed="$$failed $$t"; \
	done; \
	if [ -n "$$failed" ]; then echo "FAILED:$$failed"; exit 1; fi; \
	echo "all test targets passed"

clean:
	rm -rf cdk.out out $(STAMPS)
