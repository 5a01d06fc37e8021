# merkat — `make run` and `make test` work on a fresh machine with Python 3.11.
# the interpreter .venv is made with: the first CPython >= 3.11 that can make a venv, a
# statically linked one first (~15 % faster: scripts/pick-python.sh); `make PYTHON=...` chooses
PYTHON ?= $(shell scripts/pick-python.sh)
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: run test lint typecheck bench clean vendor chromium

$(BIN)/python:
	@py='$(PYTHON)'; \
	test -n "$$py" || { echo "make: no Python >= 3.11 found; make PYTHON=/path/to/python3.11" >&2; exit 1; }; \
	echo "$$py -m venv $(VENV)"; "$$py" -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q src >/dev/null  # bytecode, as a regular install has
	touch $(STAMP)

## run: set up .venv, install, and run the main job on embedded defaults: the live service with
## more demand than this machine can serve (a deadline solver raising its bid, best-effort ones
## saturating it, a price-limited one suspended and resumed); it prints each period and ends by
## itself after ~2.5 min with what the market did (docs/service.md, "The demo"; Ctrl-C stops it)
run: $(STAMP)
	$(BIN)/merkat demo --duration 150 --period 5

## test: set up .venv, install, and run the whole test suite
## (PostgreSQL tests: scripts/postgres.sh starts a throwaway server; with CI=true it installs
## PostgreSQL if missing and fails loudly if it cannot; locally they skip without PostgreSQL.)
test: $(STAMP)
	PGURL=$$(scripts/postgres.sh --if-available) && \
	MERKAT_TEST_POSTGRES_URL="$${MERKAT_TEST_POSTGRES_URL:-$$PGURL}" $(BIN)/python -m pytest -n 2 --dist loadgroup -q

## vendor: re-fetch the dashboard's charting library (uPlot, from npm) into the package
vendor:
	scripts/vendor-uplot.sh

## chromium: install Debian's chromium for the browser tests (tests marked browser) if missing
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

## clean: remove the venv and caches, and any C extension an earlier `make compiled` (mypyc,
## removed) left in src/ (Python would load one before its source)
clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache src/build
	find src -name '*.so' -delete
