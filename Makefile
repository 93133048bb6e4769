# Two commands set up everything on a fresh machine: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The daemon alone (`make run`), and with the test and lint toolchain (`make test`).
RUNTIME := $(VENV)/.runtime
STAMP   := $(VENV)/.installed
# `make install`: where the service's virtual environment and files go (DESTDIR: a staging
# root, for packaging or a test).
PREFIX  ?= /opt/kbatchd
DESTDIR ?=

.PHONY: run test lint unit control-plane bench chaos install clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUNTIME): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e .
	touch $(RUNTIME)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(RUNTIME) $(STAMP)

# The daemon on the embedded default: a simulated cluster on loopback, a log under ./var/.
run: $(RUNTIME)
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

# The simulated tier on TEST_WORKERS processes (pytest-xdist, one test file to a worker): its
# tests mostly wait on timers, so more workers than cores pay. The real tier in one process:
# each process would start control planes of its own.
# pytest exits 5 when it collected nothing; make treats that as a failure like any other.
TEST_WORKERS ?= 3
unit: $(STAMP) control-plane
	$(BIN)/python -m pytest -m "not real" -n $(TEST_WORKERS) --dist loadfile
	$(BIN)/python -m pytest -m real

test: lint unit

bench: $(STAMP)
	$(BIN)/python -m tests.bench

# The fault campaign: every fault of tests/chaos, seeded, then a table of runs and invariant
# violations; exits 1 on any violation (RELIABILITY.md).
chaos: $(STAMP)
	$(BIN)/python -m tests.chaos

# The service as the README's "Install as a service" lays it out: a virtual environment at
# PREFIX with kbatchd installed (not editable), the unit, the sysusers and tmpfiles snippets,
# and the settings (kept if already there). Under a DESTDIR the environment is made there and
# its scripts are rewritten to run from PREFIX. Creating the user and directories is
# systemd-sysusers' and systemd-tmpfiles' job on the target (see the README).
install:
	$(PYTHON) -m venv $(DESTDIR)$(PREFIX)
	$(DESTDIR)$(PREFIX)/bin/python -m pip install --quiet --upgrade pip
	$(DESTDIR)$(PREFIX)/bin/python -m pip install --quiet .
	if [ -n "$(DESTDIR)" ]; then \
		grep -rlI -- "$(DESTDIR)$(PREFIX)" $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/pyvenv.cfg \
		| xargs sed -i "s|$(DESTDIR)$(PREFIX)|$(PREFIX)|g"; fi
	install -D -m 0644 systemd/kbatchd.service $(DESTDIR)/etc/systemd/system/kbatchd.service
	install -D -m 0644 systemd/kbatchd.sysusers.conf $(DESTDIR)/usr/lib/sysusers.d/kbatchd.conf
	install -D -m 0644 systemd/kbatchd.tmpfiles.conf $(DESTDIR)/usr/lib/tmpfiles.d/kbatchd.conf
	test -e $(DESTDIR)/etc/kbatchd/kbatchd.toml || \
		install -D -m 0640 config/kbatchd.toml $(DESTDIR)/etc/kbatchd/kbatchd.toml

clean:
	rm -rf $(VENV) var build dist
