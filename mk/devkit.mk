# Targets of the dev kit (devkit/): loop devices, mounts, disk builders and chunk counting shared
# by the data-plane tests, the twin and the bench, plus the project's own checks. Included by
# mk/dataplane.mk; lint-dataplane runs lint-devkit.
.PHONY: lint-devkit test-devkit
lint-devkit: setup
	$(VENV)/bin/ruff check devkit test/devkit
	$(VENV)/bin/ruff format --check devkit test/devkit
	$(VENV)/bin/mypy --strict --python-version 3.11 devkit test/devkit

# Loop devices and mounts (needs_root), the project's own checks, the pytest plugin of every suite.
test-devkit: setup
	$(PYTEST) test/devkit
