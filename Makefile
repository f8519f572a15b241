# The two commands of the README:
#   make run   installs and serves the platform on its embedded default
#   make test  installs and runs the whole test suite (lint, migrations check, pytest)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
PORT ?= 8000
# The gRPC binding's port (`make run`'s second port, `make grpc`'s only one). Unset: A2A_GRPC_PORT, else 50051.
GRPC_PORT ?=

.PHONY: run test install lint web worker beat grpc bench clean

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@

install: $(VENV)/.installed

run: install
	$(PY) manage.py serve --host $(HOST) --port $(PORT)$(if $(GRPC_PORT), --grpc-port $(GRPC_PORT))

lint: install
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) manage.py makemigrations --check --dry-run

test: lint
	$(PY) -m pytest

# Services mode's web tier: WEB_PROCESSES Daphne processes (default: one per CPU) on PORT.
web: install
	$(PY) manage.py webserve --host $(HOST) --port $(PORT)

# Services mode's workers: WORKER_PROCESSES Celery worker processes (default: one per CPU).
worker: install
	$(PY) manage.py workserve

beat: install
	mkdir -p var && $(PY) -m celery -A a2a_platform beat --loglevel INFO -s var/celerybeat-schedule

# Services mode: the gRPC binding as a process of its own, on GRPC_PORT (above). The HTTP URLs it
# answers with (extended cards) are built on PUBLIC_BASE_URL (unset: http://127.0.0.1:8000).
grpc: install
	$(PY) manage.py grpcserve --host $(HOST)$(if $(GRPC_PORT), --port $(GRPC_PORT))

bench: install
	$(PY) bench/run.py

clean:
	rm -rf var test-artifacts .pytest_cache .ruff_cache
