# Two commands set up everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint unit control-plane bench clean

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

# The real control plane of the real-cluster tier, built from pinned Go modules into a cache
# outside the repo (tests/realcluster/build.sh); without Go that tier skips and says so.
control-plane:
	@if command -v go >/dev/null 2>&1; then bash tests/realcluster/build.sh >/dev/null; \
	else echo "no Go toolchain on PATH: the real-control-plane tier will skip"; fi

# pytest exits 5 when it collected nothing; make treats that as a failure like any other.
unit: $(STAMP) control-plane
	$(BIN)/python -m pytest

test: lint unit

bench: $(STAMP)
	$(BIN)/python -m tests.bench

clean:
	rm -rf $(VENV) var build dist
