# Targets of the lambdas area (owned by whoever works on it).
.PHONY: lint-lambdas test-lambdas
lint-lambdas: setup
	@echo "lint-lambdas: nothing yet"
test-lambdas: setup
	@echo "test-lambdas: nothing yet"
