# Every target creates .venv and installs what it needs: a fresh machine needs only Python 3.11+.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
CACHE  ?= $(CURDIR)/.cache

.PHONY: all demo test lint bench clean

all: test

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[cli,http,test,dev,bench]'
	touch $(STAMP)

demo: $(STAMP)
	$(PY) scripts/demo_session.py

test: $(STAMP)
	$(PY) -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check src
	$(VENV)/bin/mypy --strict src

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) $(CACHE) .pytest_cache .mypy_cache .ruff_cache
