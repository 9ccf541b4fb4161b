# The course's two commands: `make course` (set up, build, serve) and `make test` (what CI runs).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
PIP_OPTIONS ?=
STAMP := $(VENV)/.installed
export NO_MKDOCS_2_WARNING := 1

.PHONY: course setup site serve test lint format verify bench clean

course: site serve

# Create the virtualenv and install exactly the pinned versions, then the course package.
$(STAMP): requirements.lock pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else "Python 3.11 is required (found " + sys.version.split()[0] + "); pass PYTHON=/path/to/python3.11")'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==26.3" $(PIP_OPTIONS)
	$(BIN)/python -m pip install --quiet -r requirements.lock $(PIP_OPTIONS)
	$(BIN)/python -m pip install --quiet --no-deps -e . $(PIP_OPTIONS)
	@touch $@

setup: $(STAMP)

# Build the site into site/, executing every lesson (a lesson that fails stops the build).
site: $(STAMP)
	$(BIN)/mkdocs build --strict

serve: $(STAMP)
	@$(BIN)/python -m jitlab.serve --port $(PORT) --directory site

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m jitlab.notebooks lessons
	$(BIN)/pytest tests _build/notebooks/lessons --nbval-lax --nbval-current-env --durations=10

verify: $(STAMP)
	$(BIN)/jitlab verify

bench: $(STAMP)
	$(BIN)/jitlab bench

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean:
	rm -rf _build site .jitlab
