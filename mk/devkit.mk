# Targets of the dev kit (devkit/): loop devices, mounts, disk builders and chunk counting shared
# by the data-plane tests, the twin and the bench, plus the project's own checks. Included by
# mk/dataplane.mk; lint-dataplane and test-dataplane run these too.
.PHONY: lint-devkit test-devkit
lint-devkit: setup
	$(VENV)/bin/ruff check devkit test/devkit
	$(VENV)/bin/ruff format --check devkit test/devkit
	$(VENV)/bin/mypy --strict --python-version 3.11 devkit test/devkit

# Loop devices and mounts: the root-only tests skip without root.
test-devkit: setup
	$(PY) -m pytest -q test/devkit
