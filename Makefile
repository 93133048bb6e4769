# Two commands set up everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint unit bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# The daemon on the embedded default: a simulated cluster on loopback, a log under ./var/.
run: $(STAMP)
	mkdir -p var
	$(BIN)/kbatchd demo --var var

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# pytest exits 5 when it collected nothing; make treats that as a failure like any other.
unit: $(STAMP)
	$(BIN)/python -m pytest

test: lint unit

bench: $(STAMP)
	$(BIN)/python -m tests.bench

clean:
	rm -rf $(VENV) var build dist
