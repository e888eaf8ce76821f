# Targets of the client area: the `ebs-compactor` CLI for pipelines and people (client/, a package
# of its own installed editable into the project venv by the set-up; docs/client.md) and its unit
# tests (test/client: arguments, inputs against contract/schemas, --wait's lines, exit codes, on a
# fake Step Functions). Its run against the twin is test/twin/test_client.py (make test-twin).
.PHONY: lint-client test-client
CLIENT_PATHS := client test/client

lint-client: setup
	$(VENV)/bin/ruff check $(CLIENT_PATHS)
	$(VENV)/bin/ruff format --check $(CLIENT_PATHS)
	$(VENV)/bin/mypy --strict --python-version 3.11 client/ebs_compactor_client test/client

test-client: setup
	$(PYTEST) test/client
