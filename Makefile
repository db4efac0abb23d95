.DEFAULT_GOAL := help
.PHONY: help setup demo adapt test lint format

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

setup: ## create .venv and install the project with its test extras
	scripts/setup.sh

demo: ## set up, index the bundled knowledge/ and answer an example query
	scripts/demo.sh

adapt: ## adapt the embedding model to KB=DIR (default kb.path), with its calibration and verdict (ARGS: more)
	scripts/setup.sh && .venv/bin/knowledge adapt $(if $(KB),--kb $(KB)) --seed $(or $(SEED),0) $(ARGS)

test: ## set up, lint, and run the whole test suite (what CI runs)
	scripts/test.sh

lint: ## ruff lint + format check and the dead-code check
	scripts/lint.sh

format: ## apply ruff's formatting and safe fixes
	.venv/bin/ruff check --fix . && .venv/bin/ruff format .
