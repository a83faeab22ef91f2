# Every target sets up what it needs: a newcomer types `make run` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test test-fast lint bench chaos asyncapi services clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

services:
	@bash infra/local-services.sh

# Migrations, topology, one worker and a console-mode gateway on the local services.
run: install services
	$(BIN)/ltm migrate
	$(BIN)/ltm topology
	$(BIN)/python -m infra.run_local

test: install services
	$(BIN)/pytest -q

test-fast: install
	$(BIN)/pytest -q tests/unit

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

bench: install services
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.run

chaos: install services
	$(BIN)/python -m bench.chaos

asyncapi: install
	$(BIN)/python -m contracts.asyncapi > contracts/asyncapi.yaml

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
