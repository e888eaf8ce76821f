# Benchmarks: run on demand (`make bench`), never in `make test`.
.PHONY: bench lint-bench
lint-bench: setup
	@echo "lint-bench: nothing yet"
bench: setup
	@echo "bench: not built yet" && exit 1
