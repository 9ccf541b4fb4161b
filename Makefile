# The course's two commands: `make course` (set up, build, serve) and `make test` (what CI runs).
# The virtualenv's interpreter: Python 3.12 or 3.13, found by tools/find-python (PATH first,
# then pyenv's versions). `make course PYTHON=/path/to/python3.12` chooses one by hand.
export PYTHON
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000
JOBS ?= logical
PIP_OPTIONS ?=
# A wheelhouse/ folder beside the course (see `make wheelhouse`) means: install from it,
# with no package index at all. That is the workshop's offline recipe.
ifneq ($(wildcard wheelhouse/*.whl),)
PIP_OPTIONS += --no-index --find-links wheelhouse
endif
STAMP := $(VENV)/.installed
export NO_MKDOCS_2_WARNING := 1
# Every lesson is executed under nbval; the recorder (a pytest plugin of the package)
# keeps the executed notebooks in _build/executed, where the site picks them up instead of running them again.
NBVAL := --nbval-lax --nbval-current-env --jitlab-record=_build/executed

.PHONY: course setup site site-offline serve lab test test-fast lint format exercises verify bench matrix \
	upstream runner-speed wheelhouse dist clean lock

course: site serve

# Create the virtualenv and install exactly the pinned versions, then the course package.
# The venv starts without pip, and pip 26.3 is installed by the pip wheel that Python
# bundles, run as a zip (as ensurepip does): one pip install instead of two and an
# uninstall. Packages are installed without bytecode, which step 5 then compiles on every
# core at once (pip compiles one file at a time: about half of its CPU time).
# The pip wheel ensurepip would install: in ensurepip's folder, or where the distribution
# keeps it (Debian and Fedora); without one, ensurepip itself.
export BUNDLED_PIP := import ensurepip, glob, os; \
  folders = [os.path.join(os.path.dirname(ensurepip.__file__), "_bundled"), getattr(ensurepip, "_WHEEL_PKG_DIR", None)]; \
  print(sorted(w for f in folders if f for w in glob.glob(os.path.join(f, "pip-*.whl")))[-1])
$(STAMP): requirements.lock pyproject.toml
	@interpreter=$$(tools/find-python) || exit 1; \
	if [ -x $(BIN)/python ] && ! $(BIN)/python -c 'import sys; sys.exit(sys.version_info[:2] < (3, 12))' 2>/dev/null; then \
	  echo "$(VENV) was made with an older Python; making it again with $$interpreter"; rm -rf $(VENV); fi; \
	echo "[setup 1/5] creating $(VENV) with $$interpreter"; $$interpreter -m venv --without-pip $(VENV)
	@echo "[setup 2/5] pip 26.3"
	@if bundled=$$($(BIN)/python -c "$$BUNDLED_PIP" 2>/dev/null); then \
	  $(BIN)/python "$$bundled/pip" install --quiet "pip==26.3" $(PIP_OPTIONS); \
	else $(BIN)/python -m ensurepip --default-pip >/dev/null && \
	  $(BIN)/python -m pip install --quiet --upgrade "pip==26.3" $(PIP_OPTIONS); fi
	@echo "[setup 3/5] $$(grep -c '==' requirements.lock) pinned packages from requirements.lock" \
	  "(JAX, JupyterLab, MkDocs: the long step, a few minutes the first time)"
	@$(BIN)/python -m pip install --quiet --no-compile -r requirements.lock $(PIP_OPTIONS)
	@echo "[setup 4/5] the course's own package (jitlab), editable"
	@# setuptools' "Editable installation" box is information only (a folder named like
	@# the package may shadow it): that one message is filtered, any other still shows.
	@PYTHONWARNINGS="ignore:Editable installation" \
	  $(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e . $(PIP_OPTIONS)
	@# Bytecode for the packages and the course, compiled once here: kernels run with
	@# PYTHONDONTWRITEBYTECODE, and an editable install leaves the course's to the first
	@# import, so without it every check would compile them again.
	@echo "[setup 5/5] compiling the bytecode (every core), JupyterLab's settings"
	@$(BIN)/python -W ignore -m compileall -q -j 0 jitlab \
	  $$($(BIN)/python -c 'import sysconfig; print(*sorted({sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}))')
	@# JupyterLab opens a lesson's .py as a notebook on double-click (Jupytext's viewer).
	@mkdir -p $(VENV)/share/jupyter/lab/settings
	@cp tools/jupyterlab-overrides.json $(VENV)/share/jupyter/lab/settings/overrides.json
	@touch $@

setup: $(STAMP)

# Build the site into site/: lessons executed (only those changed since the last run).
site: $(STAMP)
	@echo "building the site: every lesson that changed is executed first (a line each), then the pages"
	$(BIN)/mkdocs build --strict

# JupyterLab on the course folder: lessons and exercises open as notebooks. LAB_OPTIONS
# go to JupyterLab as they are, e.g. `make lab LAB_OPTIONS="--no-browser --port 8889"`;
# as root (a container), JupyterLab refuses to start without --allow-root: say so first.
LAB_OPTIONS ?=
lab: $(STAMP)
	@if [ "$$(id -u)" = 0 ] && ! printf '%s' "$(LAB_OPTIONS)" | grep -q -- --allow-root; then \
	  echo "make lab: you are root, and JupyterLab refuses to run as root unless told to."; \
	  echo "In a container that is expected: make lab LAB_OPTIONS=--allow-root"; \
	  echo "(add --ip=0.0.0.0 --no-browser to reach it from outside the container)"; exit 2; fi
	$(BIN)/jupyter lab --notebook-dir=. $(LAB_OPTIONS)

# Every wheel the course installs, for a room with no network: copy wheelhouse/ next to the
# course on each laptop, and `make course` installs from it. For another platform, e.g.
# macOS on Apple silicon: make wheelhouse WHEEL_PLATFORM="--platform macosx_11_0_arm64"
wheelhouse: $(STAMP)
	$(BIN)/python -m pip download --quiet --dest wheelhouse --only-binary=:all: \
	  $(if $(WHEEL_PLATFORM),$(WHEEL_PLATFORM) --python-version 3.12,) \
	  -r requirements.lock "pip==26.3"
	@echo "wheelhouse/: $$(ls wheelhouse | wc -l) files"

# The course's package as a wheel, for a team that wants `jitlab doctor` and `pytest --jitlab`
# in its own project: `pip install _build/dist/jitlab-*.whl` there needs JAX only (the course's
# toolchain is the `course` extra, which `make setup` installs from the lock).
dist: $(STAMP)
	rm -rf _build/dist _build/dist-source && mkdir -p _build/dist-source
	cp -r jitlab pyproject.toml README.md _build/dist-source/
	$(BIN)/python -m pip wheel --quiet --no-deps --no-build-isolation -w _build/dist _build/dist-source
	@ls _build/dist/*.whl

# A copy of the site that works opened from its folder (file://), search included: for a
# USB stick in a room with no network. Open site-offline/index.html.
site-offline: $(STAMP)
	OFFLINE=true $(BIN)/mkdocs build --strict --site-dir site-offline

serve: $(STAMP)
	@$(BIN)/jitlab dev serve --port $(PORT) --directory site

# The lessons and the course's tests, on every core (pytest-xdist; JOBS=1 for one process).
# The lessons first, a file to a worker (a notebook's cells share one kernel), with XLA's
# defaults, since they time things; then the tests and the site, which renders the lessons
# just executed: a file to a worker too, but for the few whose tests go one by one, and the
# slow files first (tests/conftest.py). The tests compile hundreds of small programs and never time
# them: with XLA's backend optimisations off they take about a fifth less time.
TEST_XLA_FLAGS := --xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true
test: $(STAMP) lint
	$(BIN)/jitlab dev notebooks lessons
	$(BIN)/pytest -n $(JOBS) --dist loadfile _build/notebooks/lessons $(NBVAL) --durations=5
	XLA_FLAGS="$(TEST_XLA_FLAGS)" $(BIN)/pytest -n $(JOBS) --dist loadfile tests \
	  --durations=15

# The authors' lane: lint, the course's own tests and the graders; no lessons, no site.
test-fast: $(STAMP) lint
	XLA_FLAGS="$(TEST_XLA_FLAGS)" $(BIN)/pytest -n $(JOBS) --dist loadfile tests \
	  -m "not slow" --durations=10

# A learner's exercises/ are theirs, written in their own style: outside CI, ruff leaves
# them out (and says so). CI checks out a clean tree, where they are the generated copies,
# and lints them; `jitlab dev exercises --check` compares them with their sources.
LINT_EXCLUDE := $(if $(CI),,--extend-exclude exercises)
lint: $(STAMP)
	@$(if $(CI),,echo "lint: exercises/ left out of ruff (yours to edit; CI lints the generated copies)")
	$(BIN)/ruff check $(LINT_EXCLUDE) .
	$(BIN)/ruff format --check $(LINT_EXCLUDE) .
	$(BIN)/jitlab dev exercises --check

format: $(STAMP)
	$(BIN)/jitlab dev canonical
	$(BIN)/ruff format $(LINT_EXCLUDE) .
	$(BIN)/ruff check --fix $(LINT_EXCLUDE) .

# Regenerate the learners' exercises/ from their sources in solutions/.
exercises: $(STAMP)
	$(BIN)/jitlab dev exercises

verify: $(STAMP)
	$(BIN)/jitlab dev verify

bench: $(STAMP)
	$(BIN)/jitlab dev bench

matrix: $(STAMP)
	$(BIN)/jitlab dev matrix

upstream: $(STAMP)
	$(BIN)/jitlab dev upstream

runner-speed: $(STAMP)
	$(BIN)/jitlab dev runner-speed

clean:
	rm -rf _build site site-offline .jitlab

# Re-resolve requirements.in to the newest versions that install together (needs the index).
lock:
	@interpreter=$$(tools/find-python) || exit 1; rm -rf _build/lock && $$interpreter -m venv _build/lock && \
	_build/lock/bin/python -m pip install --quiet "pip==26.3" && \
	_build/lock/bin/python -m pip install --quiet -r requirements.in && \
	{ echo "# Generated by \`make lock\` from requirements.in on Python $$(_build/lock/bin/python -c 'import platform; print(platform.python_version())'): every package the course"; \
	  echo "# installs, pinned. Do not edit by hand."; _build/lock/bin/python -m pip freeze --all | grep -v '^pip=='; } > requirements.lock
	@echo "requirements.lock: $$(grep -c '==' requirements.lock) packages"
