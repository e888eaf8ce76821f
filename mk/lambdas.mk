# Targets of the lambdas area: the task Lambdas in lambdas/compactor and their tests.
.PHONY: lint-lambdas test-lambdas
lint-lambdas: setup
	$(VENV)/bin/ruff check lambdas test/lambdas
	$(VENV)/bin/ruff format --check lambdas test/lambdas
	cd lambdas && ../$(VENV)/bin/mypy --strict --cache-dir=/dev/null compactor
# moto in-process, one account per test: safe in parallel workers.
test-lambdas: setup
	$(PYTEST) $(XDIST) -c test/lambdas/pytest.ini test/lambdas
