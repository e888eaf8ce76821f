# Targets of the cdk area (owned by whoever works on it).
.PHONY: lint-cdk test-cdk
lint-cdk: setup
	@echo "lint-cdk: nothing yet"
test-cdk: setup
	@echo "test-cdk: nothing yet"
