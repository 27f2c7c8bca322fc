# Every target creates .venv and installs what it needs: a fresh machine needs only Python 3.11+.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
CACHE  ?= $(CURDIR)/.cache

.PHONY: all demo test fuzz lint docs bench perf-check clean peers

# Third-party peers (official MCP SDKs from npm, the conformance suite, Node 22) go into $(CACHE).
# Each scripts/install_*.sh installs one group and is idempotent (fast when already there).
export STURDYRPC_CACHE := $(CACHE)

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cli,http,test,dev,bench,pydantic,dev-server,redis,auth,otel]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) scripts/demo_session.py
	bash scripts/check_demo.sh $(PY)

peers: $(STAMP)
	@set -e; for s in scripts/install_*.sh; do [ -f "$$s" ] || continue; echo "installing peers: $$s"; bash "$$s"; done

test: $(STAMP) peers
	$(PY) -m pytest -q

# The property tests with many more random examples (tests/conftest.py: the "fuzz" hypothesis
# profile); `make test` runs them derandomized, the same examples every time.
fuzz: $(STAMP)
	HYPOTHESIS_PROFILE=fuzz $(PY) -m pytest -q -m hypothesis --timeout=3600 tests

lint: $(STAMP)
	$(VENV)/bin/ruff check src examples
	$(VENV)/bin/mypy --strict src examples
	$(VENV)/bin/lint-imports --no-cache  # the import layers of pyproject.toml [tool.importlinter]

# The documentation site (mkdocs.yml) into site/; --strict: a broken link or anchor, or a
# docstring the API reference cannot read, fails the build. The docs extra is installed first.
$(DOCS_STAMP): $(STAMP)
	$(PY) -m pip install -q -e '.[docs]'
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

bench: $(STAMP) peers
	$(PY) bench/run_all.py

# Instructions per request of every path (callgrind), against the baseline committed in
# bench/baselines/ for this machine kind and Python version: a rise beyond 3% fails.
perf-check: $(STAMP)
	@command -v valgrind >/dev/null || { echo "installing valgrind (Debian)"; apt-get install -y -q valgrind >/dev/null 2>&1 || sudo apt-get install -y -q valgrind; }
	$(PY) bench/perf_check.py

clean:
	rm -rf $(VENV) $(CACHE) site .pytest_cache .mypy_cache .ruff_cache .hypothesis .import_linter_cache .grimp_cache
