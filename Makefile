# The two commands a newcomer needs:  make demo  (the main job)  and  make test  (the tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Extras the demo and the tests need (`all`). torch is installed first, pinned to the CPU build
# 2.13.0: an unpinned torch pulled by trl would be a multi-GB CUDA build.
EXTRAS ?= all
TORCH ?= torch==2.13.0
DEMO_OUT ?= demo_out

.PHONY: setup system-deps demo test test-all lint docs pip-check ci bench clean study-check verifiers-venv

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip "setuptools>=77.0.3"
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	@# textworld 1.7.0's wheel has a blank line inside its WHEEL header block, so its Tag line is
	@# read as body and `pip check` calls it unsupported: drop the blank line (metadata only).
	@for f in $(VENV)/lib/python*/site-packages/textworld-*.dist-info/WHEEL; do \
	  [ -f "$$f" ] && sed -i '/^$$/d' "$$f" || true; done
	touch $@

# Headless Chromium for the web shop's browser test (Debian package; needs root and apt).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's 'chromium' package" >&2; exit 1; fi; }

# The language model the lm agent and its tests play (converted once into the cache; a second
# call prints the folder at once, with no network).
MODEL ?= smollm2-135m
setup: $(VENV)/.installed
	$(BIN)/budgetmix prepare model $(MODEL) --quiet >/dev/null

demo: setup
	$(BIN)/budgetmix demo --out $(DEMO_OUT)

# Everything that fits the CI time budget, `slow` tests included (pyproject's addopts leave out
# the `soak` tier).
# Two pytest-xdist workers, one test file each at a time (a file's module fixtures are built
# once); TEST_WORKERS=0 runs the suite in one process.
TEST_WORKERS ?= 2
test: setup system-deps
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# verifiers 0.4.0 pins mcp==2.0.0, which conflicts with our openenv extra: it gets a venv of its
# own, used only by tests/test_verifiers.py (against `budgetmix serve` from $(VENV)).
VERIFIERS_VENV ?= .venv-verifiers
$(VERIFIERS_VENV)/.installed:
	$(PYTHON) -m venv $(VERIFIERS_VENV)
	$(VERIFIERS_VENV)/bin/pip install --quiet --upgrade pip
	$(VERIFIERS_VENV)/bin/pip install --quiet "verifiers[openenv]==0.4.0"
	touch $@

verifiers-venv: $(VERIFIERS_VENV)/.installed

# Every tier: `make test` plus what pyproject's addopts leave out: the soaks (100,000 steps per
# family in one process each), the learning runs, the docs' code blocks marked slow
# (`docs_slow`), the verifiers run (`verifiers`) and the chat agent against `transformers serve`
# hosting SmolLM2 (`serve_model`). The -m expression selects every test.
test-all: setup system-deps verifiers-venv
	VERIFIERS_VENV=$(abspath $(VERIFIERS_VENV)) $(BIN)/python -m pytest -q -m "soak or not soak"

# ruff's lint and format rules are in pyproject.toml; CI fails on any finding.
lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# The docs site (mkdocs.yml, docs/); --strict turns a broken link or a page off the nav into an error.
docs: setup
	$(BIN)/mkdocs build --strict --quiet

# Every installed distribution's requirements are met in the full install.
pip-check: setup
	$(BIN)/pip check

# What CI runs (.ci/run): habits first (fast), then the tests, then the docs build.
ci: lint pip-check test study-check docs

bench: setup
	$(BIN)/python -m pytest benchmarks --benchmark-only -p no:cacheprovider

clean:
	rm -rf $(VENV) $(VERIFIERS_VENV) $(DEMO_OUT) .benchmarks site

# The study's tables from its committed records, byte for byte (fails while study/records is
# missing: run `budgetmix study` first); docs/reference-results.md from study/reference/.
study-check: setup
	@ls study/records/*.jsonl.gz >/dev/null
	$(BIN)/budgetmix study --report-only --quiet
	$(BIN)/budgetmix study --check
	$(BIN)/budgetmix study --report-only --quiet --out study/lm/study --docs docs/study-lm.md \
		--compare-with study
	$(BIN)/budgetmix study --check --out study/lm/study
	$(BIN)/python examples/reference_results.py
	git diff --exit-code -- study/tables docs/study.md study/lm/study/tables docs/study-lm.md \
		docs/reference-results.md
