# Every target sets up what it needs: a newcomer types `make run` or `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# `make run` on the local services: PostgreSQL trusts `postgres` on 127.0.0.1 here.
# Set LTM_DATABASE_URL / LTM_AMQP_URL to run against others.
RUN_ENV := LTM_DATABASE_URL=$${LTM_DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/ltm} \
	LTM_AMQP_URL=$${LTM_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}

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
	$(RUN_ENV) $(BIN)/ltm migrate
	$(RUN_ENV) $(BIN)/ltm topology
	$(RUN_ENV) $(BIN)/python -m infra.run_local

# Each test run makes its own database and broker virtual host, and removes them after.
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

# Three RabbitMQ nodes in one cluster and a PostgreSQL primary with a synchronous standby, all
# of our own, under $(CLUSTER_DIR); prints the settings to export. The machine's own broker and
# database are never touched. `make cluster-down` stops exactly what the folder records.
CLUSTER_DIR ?= .cluster

.PHONY: cluster cluster-down

cluster: install
	@$(BIN)/python -m infra.localnodes up --dir $(CLUSTER_DIR)

cluster-down: install
	@$(BIN)/python -m infra.localnodes down --dir $(CLUSTER_DIR)
