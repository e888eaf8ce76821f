# Targets of the dataplane area (owned by whoever works on it).
.PHONY: lint-dataplane test-dataplane
lint-dataplane: setup
	@echo "lint-dataplane: nothing yet"
test-dataplane: setup
	@echo "test-dataplane: nothing yet"
