# Conveyor: `make run` to try it, `make test` to check it. See README.md.
SHELL := /bin/bash
PY := .venv/bin/python
PORT ?= 8000
export PORT

.PHONY: install run test test-fast lint format bench lock clean

install:
	@scripts/install

# scripts/run: port check, migrate, setup_periodic_tasks, seed_demo, then scripts/Procfile.
run: install
	@exec $(PY) scripts/run

test: install
	@scripts/test-services
	@scripts/run-tests

# Everything but the chaos scenarios, and no RabbitMQ leg: for a quick local check, never CI.
test-fast: install
	@scripts/test-services
	@scripts/run-tests -m "not chaos"

lint: install
	@.venv/bin/ruff check .
	@.venv/bin/ruff format --check .

format: install
	@.venv/bin/ruff format .
	@.venv/bin/ruff check --fix .

bench: install
	@scripts/test-services
	@$(PY) -m bench

# Re-pin every dependency (needs the network): edit pyproject.toml first.
lock:
	@$(PY) -m pip install --quiet pip-tools==7.6.2
	@.venv/bin/pip-compile --quiet --generate-hashes --allow-unsafe --extra test --strip-extras \
		--no-emit-index-url --no-emit-find-links -o requirements.lock pyproject.toml

clean:
	rm -rf .venv var .pytest_cache
