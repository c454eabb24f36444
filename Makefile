# kueueweb: `make run` sets up and starts the whole application (embedded mode);
# `make test` runs the test suite (SQLite, then PostgreSQL + Redis when they answer).

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PORT ?= 8000
PG_URL ?= postgres://postgres@127.0.0.1:5432/kueueweb
REDIS_TEST_URL ?= redis://127.0.0.1:6379/15
# `make run` keeps the demo busy with a few new jobs every 15 s (0 turns it off).
KUEUEWEB_DEMO_TRAFFIC_INTERVAL_SECONDS ?= 15
# `make run` serves as production does, with DEBUG off (in-app error pages, no debug output)
# and keys of this installation, generated once into var/ (mode 0600) by `local_secrets`,
# which runs with the development settings the keys replace. Plain HTTP on this machine:
# cookies without the Secure flag. Django's debug pages: `make run DEBUG=true`.
DEBUG ?= false
KUEUEWEB_VAR_DIR ?= $(CURDIR)/var
RUN_ENV = KUEUEWEB_VAR_DIR=$(KUEUEWEB_VAR_DIR) DEBUG=$(DEBUG) \
	SECRET_KEY_FILE=$(KUEUEWEB_VAR_DIR)/secret_key \
	KUEUEWEB_ENCRYPTION_KEY_FILE=$(KUEUEWEB_VAR_DIR)/encryption_key \
	SESSION_COOKIE_SECURE=false CSRF_COOKIE_SECURE=false

.PHONY: install run test test-sqlite test-postgres lint clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

# Front-end libraries (htmx with idiomorph, Chart.js; axe-core for the browser tests) from
# the npm registry, pinned by package-lock.json and served as static files from node_modules/.
node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

install: $(VENV)/.installed node_modules/.package-lock.json

run: install
	KUEUEWEB_VAR_DIR=$(KUEUEWEB_VAR_DIR) DEBUG=true $(PY) manage.py local_secrets
	$(RUN_ENV) $(PY) manage.py migrate --noinput
	$(RUN_ENV) $(PY) manage.py collectstatic --noinput --verbosity 0
	$(RUN_ENV) $(PY) manage.py demo --if-empty
	$(RUN_ENV) $(PY) manage.py ensure_admin
	$(RUN_ENV) PORT=$(PORT) \
		KUEUEWEB_DEMO_TRAFFIC_INTERVAL_SECONDS=$(KUEUEWEB_DEMO_TRAFFIC_INTERVAL_SECONDS) \
		$(PY) manage.py serve

test: install test-sqlite test-postgres

test-sqlite: install
	env -u DATABASE_URL -u REDIS_URL $(PY) -m pytest

# Runs when PostgreSQL answers; under CI it must answer (.ci/run starts it).
test-postgres: install
	@if $(PY) -c "import socket; socket.create_connection(('127.0.0.1', 5432), 2)" 2>/dev/null; then \
		DATABASE_URL=$(PG_URL) REDIS_URL=$(REDIS_TEST_URL) $(PY) -m pytest; \
	elif [ -n "$$CI" ]; then \
		echo "PostgreSQL is not answering on 127.0.0.1:5432" >&2; exit 1; \
	else \
		echo "PostgreSQL is not answering on 127.0.0.1:5432: skipping the PostgreSQL pass"; \
	fi

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy .
	$(PY) manage.py makemigrations --check --dry-run

clean:
	rm -rf $(VENV) var staticfiles
