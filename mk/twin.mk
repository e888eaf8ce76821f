# Targets of the twin area (owned by whoever works on it).
.PHONY: lint-twin test-twin
lint-twin: setup
	@echo "lint-twin: nothing yet"
test-twin: setup
	@echo "test-twin: nothing yet"
demo: setup
	@echo "demo: not built yet" && exit 1
