# Every target sets up the virtualenv it needs; the services it only checks: `make services`
# installs and starts the local ones, saying each change.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

# `make run` on the local services: PostgreSQL trusts `postgres` on 127.0.0.1 here.
# Set LTM_DATABASE_URL / LTM_AMQP_URL to run against others.
run: export LTM_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/ltm
run: export LTM_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/

.PHONY: install run test test-fast lint bench chaos asyncapi services check-services clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

# Installs, configures and starts the local PostgreSQL and RabbitMQ where needed (as root),
# saying each change. Nothing else does: the targets below only check that both answer.
services:
	@bash infra/local-services.sh --install

check-services:
	@bash infra/local-services.sh

# Migrations, topology, the demo data put back, one worker and a console-mode gateway.
run: install check-services
	@$(BIN)/ltm migrate
	@$(BIN)/ltm topology
	@$(BIN)/python -m infra.run_local

# Each test run makes its own database and broker virtual host, and removes them after.
test: install check-services
	$(BIN)/pytest -q

test-fast: install
	$(BIN)/pytest -q tests/unit

# The alert rules are checked by promtool, from Debian's `prometheus` package: lint fails,
# saying how to get it, when it is missing (.ci/run installs it). PROMTOOL=... for another one.
PROMTOOL ?= promtool
OBSERVABILITY := infra/observability

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	@command -v $(PROMTOOL) >/dev/null 2>&1 || { \
	  echo "lint: promtool is missing: apt-get install --no-install-recommends prometheus" \
	    "(Debian's package has it), or set PROMTOOL to a promtool binary" >&2; exit 1; }
	$(PROMTOOL) check rules $(OBSERVABILITY)/alerts.yml
	$(PROMTOOL) check config $(OBSERVABILITY)/prometheus.yml
	$(PROMTOOL) test rules $(OBSERVABILITY)/alerts_test.yml
	$(BIN)/pytest -q tests/unit/test_observability.py

bench: install check-services
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.run

chaos: install check-services
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
