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

.PHONY: install run chat test test-fast lint bench chaos chaos-cluster asyncapi services \
	check-services clean console console-assets axe-assets screenshots

install: $(STAMP)

# Both distributions in one pip call, so that the service's tomori-ltm-contracts resolves to
# the checkout's contracts/ (editable both: a checkout runs its own code).
$(STAMP): pyproject.toml contracts/pyproject.toml
	# pip is the last thing venv installs: without it, the venv was interrupted; made anew.
	test -x $(BIN)/pip || $(PYTHON) -m venv --clear $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ./contracts -e '.[dev]'
	touch $(STAMP)

# Installs, configures and starts the local PostgreSQL and RabbitMQ where needed (as root),
# saying each change. Nothing else does: the targets below only check that both answer.
services:
	@bash deploy/local-services.sh --install

check-services:
	@bash deploy/local-services.sh

# Migrations, topology, the demo data put back, one worker and a console-mode gateway.
run: install check-services
	@$(BIN)/ltm migrate
	@$(BIN)/ltm topology
	@$(BIN)/python -m infra.run_local

# The example bot's loop in the terminal, as a member of the demo server, on `make run`'s worker
# (run it in a second terminal); it asks the LLM at LTM_LLM_BASE_URL, and says so when unset.
chat: export LTM_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/ltm
chat: export LTM_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/
chat: install check-services
	@$(BIN)/python -m examples.chat

# Each test run makes its own database and broker virtual host, and removes them after.
# Two processes share the modules (tests/support/scheduling.py), each a test run of its own;
# TEST_PROCESSES=0 runs one (docs/development.md says how long each takes).
TEST_PROCESSES ?= 2

test: install check-services
	$(BIN)/pytest -q --numprocesses=$(TEST_PROCESSES) --dist=loadscope --durations=15

test-fast: install
	$(BIN)/pytest -q tests/unit

# The alert rules are checked by promtool, from Debian's `prometheus` package: lint fails,
# saying how to get it, when it is missing (.ci/run installs it). PROMTOOL=... for another one.
PROMTOOL ?= promtool
OBSERVABILITY := deploy/observability

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m infra.storage.schema_check
	@command -v $(PROMTOOL) >/dev/null 2>&1 || { \
	  echo "lint: promtool is missing: apt-get install --no-install-recommends prometheus" \
	    "(Debian's package has it), or set PROMTOOL to a promtool binary" >&2; exit 1; }
	$(PROMTOOL) check rules $(OBSERVABILITY)/alerts.yml
	$(PROMTOOL) check config $(OBSERVABILITY)/prometheus.yml
	$(PROMTOOL) test rules $(OBSERVABILITY)/alerts_test.yml
	$(BIN)/pytest -q tests/unit/deploy/test_observability.py
	$(MAKE) --no-print-directory lint-k8s

# The Kubernetes manifests against the schemas of their kinds (bundled by kubernetes-validate,
# KEDA's vendored in deploy/k8s/schemas), offline, and against the code they run.
.PHONY: lint-k8s
lint-k8s: install
	$(BIN)/pytest -q tests/unit/deploy/test_k8s.py

# The results page's table of the newest run is rendered from bench/results.json after the
# bench, also when a phase failed (the bench's exit status is kept).
bench: install check-services
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	$(BIN)/python -m bench.run; status=$$?; $(BIN)/python -m bench.results_page && exit $$status

chaos: install check-services
	$(BIN)/python -m bench.chaos

# The chaos run on a three-node RabbitMQ cluster and a PostgreSQL pair of its own (started
# and stopped by the run; the machine's broker and database are never touched).
chaos-cluster: install check-services
	$(BIN)/python -m bench.chaos.cluster

asyncapi: install
	$(BIN)/python -m contracts.asyncapi > contracts/asyncapi.yaml

# `ltm console` on the settings of `make run`; LTM_CONSOLE_PASSWORD_HASH must be set (README).
console: export LTM_DATABASE_URL ?= postgresql://postgres@127.0.0.1:5432/ltm
console: export LTM_AMQP_URL ?= amqp://guest:guest@127.0.0.1:5672/
console: install check-services
	@$(BIN)/ltm console

# The console's one JavaScript library, from the npm registry at a pinned version whose
# tarball must match the registry's integrity hash, copied with its licence into the package
# (committed: nothing is fetched when the console runs). `make console-assets` reproduces it.
UPLOT_VERSION := 1.6.32
UPLOT_INTEGRITY := sha512-KIMVnG68zvu5XXUbC4LQEPnhwOxBuLyW1AHtpm6IKTXImkbLgkMy+jabjLgSLMasNuGGzQm/ep3tOkyTxpiQIw==
VENDOR := console/static/vendor

console-assets:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd "$$tmp" && npm pack --silent uplot@$(UPLOT_VERSION) >/dev/null); \
	tarball="$$tmp/uplot-$(UPLOT_VERSION).tgz"; \
	python3 -c 'import base64, hashlib, sys; digest = hashlib.sha512(open(sys.argv[1], "rb").read()).digest(); sys.exit(0 if "sha512-" + base64.b64encode(digest).decode() == sys.argv[2] else "uplot: the tarball does not match $(UPLOT_INTEGRITY)")' "$$tarball" '$(UPLOT_INTEGRITY)'; \
	tar xzf "$$tarball" -C "$$tmp"; \
	mkdir -p $(VENDOR); \
	cp "$$tmp/package/dist/uPlot.iife.min.js" "$$tmp/package/dist/uPlot.min.css" $(VENDOR)/; \
	cp "$$tmp/package/LICENSE" $(VENDOR)/uPlot.LICENSE; \
	printf 'uplot %s (MIT), npm tarball %s\n' '$(UPLOT_VERSION)' '$(UPLOT_INTEGRITY)' > $(VENDOR)/VERSIONS; \
	echo "console assets: uplot $(UPLOT_VERSION) in $(VENDOR)"

# axe-core, which the browser tests inject into every console page to check its accessibility,
# from its npm tarball at a pinned version whose integrity hash is checked (committed: the
# tests fetch nothing). `make axe-assets` reproduces it. MPL-2.0: its licence goes with it.
AXE_VERSION := 4.14.1
AXE_INTEGRITY := sha512-FHfa+lmNjQZfJz1q8wKqIDwC6DExcHt/pkjNQb09a3NPjCKg2rhu5qb2S4r76ASyFNNtuFooJpZe37OgudVGtQ==
TEST_VENDOR := tests/support/vendor

axe-assets:
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	(cd "$$tmp" && npm pack --silent axe-core@$(AXE_VERSION) >/dev/null); \
	tarball="$$tmp/axe-core-$(AXE_VERSION).tgz"; \
	python3 -c 'import base64, hashlib, sys; digest = hashlib.sha512(open(sys.argv[1], "rb").read()).digest(); sys.exit(0 if "sha512-" + base64.b64encode(digest).decode() == sys.argv[2] else "axe-core: the tarball does not match $(AXE_INTEGRITY)")' "$$tarball" '$(AXE_INTEGRITY)'; \
	tar xzf "$$tarball" -C "$$tmp"; \
	mkdir -p $(TEST_VENDOR); \
	cp "$$tmp/package/axe.min.js" $(TEST_VENDOR)/; \
	cp "$$tmp/package/LICENSE" $(TEST_VENDOR)/axe-core.LICENSE; \
	cp "$$tmp/package/LICENSE-3RD-PARTY.txt" $(TEST_VENDOR)/axe-core.LICENSE-3RD-PARTY.txt; \
	printf 'axe-core %s (MPL-2.0), npm tarball %s\n' '$(AXE_VERSION)' '$(AXE_INTEGRITY)' > $(TEST_VENDOR)/VERSIONS; \
	echo "test assets: axe-core $(AXE_VERSION) in $(TEST_VENDOR)"

# Runs the console's browser tests and keeps their screenshots for the README.
screenshots: install check-services
	LTM_SCREENSHOTS=docs/screenshots $(BIN)/pytest -q tests/e2e/test_console.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache

# Three RabbitMQ nodes in one cluster and a PostgreSQL primary with a synchronous standby, all
# of our own, under $(CLUSTER_DIR); prints the settings to export. The machine's own broker and
# database are never touched. `make cluster-down` stops exactly what the folder records.
CLUSTER_DIR ?= .cluster

.PHONY: cluster cluster-down

cluster: install
	@$(BIN)/python -m harness.localnodes up --dir $(CLUSTER_DIR)

cluster-down: install
	@$(BIN)/python -m harness.localnodes down --dir $(CLUSTER_DIR)

# The settings table of docs/contract.md, rendered from infra/settings.py (a unit test fails
# when the page differs from it).
.PHONY: docs

docs: install
	$(BIN)/python -m infra.settings_table
