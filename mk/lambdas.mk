# Targets of the lambdas area: the task Lambdas in lambdas/compactor and their tests.
.PHONY: lint-lambdas test-lambdas
lint-lambdas: setup
	$(VENV)/bin/ruff check lambdas
	$(VENV)/bin/ruff format --check lambdas
	cd lambdas && ../$(VENV)/bin/mypy --strict --cache-dir=/dev/null compactor
test-lambdas: setup
	cd lambdas && ../$(VENV)/bin/python -m pytest -q tests
