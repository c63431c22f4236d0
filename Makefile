# E31 Network: `make run` starts the product standalone; `make test` runs the whole suite.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
PY := $(VENV)/bin/python
export PIP_DISABLE_PIP_VERSION_CHECK := 1

# Test services: the real PostgreSQL and Redis of this machine (.ci/run starts them).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/e31
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
TEST_E2E_REDIS_DB ?= 14
# Two pytest-xdist workers (this machine has 2 cores), a module (file) per worker at a time, so a
# module's shared fixtures stay on one; each worker on its own database and Redis numbers
# (tests/workers.py: gw0 Redis 15 and 14, gw1 13 and 12). TEST_WORKERS=0 runs serially.
TEST_WORKERS ?= 2

.PHONY: run test lint bench clean

$(VENV)/.installed: pyproject.toml agent/pyproject.toml cli/pyproject.toml protocol/pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ./protocol -e '.[examples,dev]' -e './agent[cloud]' -e ./cli  # e31-protocol: shared by server and agent
	touch $@

run: $(VENV)/.installed
	scripts/sandbox_tools.sh
	$(PY) manage.py migrate --noinput
	$(PY) manage.py standalone

# The layers and forbidden-import contracts are in pyproject.toml ([tool.importlinter], docs/architecture.md);
# no module under apps/, agent/, cli/ or protocol/ may be in an import cycle, TYPE_CHECKING imports included
# (scripts/import_cycles.py); apps read the clock only through apps.core.clock (scripts/clock_check.py).
# E31_LINT=1: the settings write nothing (no var/, an in-memory database), so lint leaves only caches (issue 22).
lint: export E31_LINT := 1
lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(PY) manage.py makemigrations --check --dry-run
	$(VENV)/bin/pytest -q tests/test_no_forged_states.py tests/test_state_writers.py  # no test writes a state (issue 13); needs no database
	$(PY) scripts/state_writers.py  # product code writes each state only through its one door (issue 22)
	$(VENV)/bin/lint-imports
	$(PY) scripts/import_cycles.py
	$(PY) scripts/clock_check.py

# One run over TEST_WORKERS xdist workers: the live-stack modules (marked e2e: uvicorn, Celery, agents)
# in one group, one after another on one worker, beside every other module on the other (tests/conftest.py,
# pytest_xdist_make_scheduler: two live stacks at once on this 2-core machine made timing drills fail).
TEST_ENV = DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) E31_E2E_REDIS_DB=$(TEST_E2E_REDIS_DB) \
	E31_CELERY_EAGER=1
test: $(VENV)/.installed lint
	$(TEST_ENV) $(VENV)/bin/pytest -n $(TEST_WORKERS) --dist loadgroup --durations=10

bench: $(VENV)/.installed
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) $(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) var
