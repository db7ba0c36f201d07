# The two commands a newcomer needs:  make demo  (the main job)  and  make test  (the tests).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# Extras the demo and the tests need (`all`). torch is installed first, pinned to the CPU build
# 2.13.0: an unpinned torch pulled by trl would be a multi-GB CUDA build.
EXTRAS ?= all
TORCH ?= torch==2.13.0
DEMO_OUT ?= demo_out

.PHONY: setup system-deps demo test bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[$(EXTRAS)]"
	touch $@

# Headless Chromium for the web shop's browser test (Debian package; needs root and apt).
system-deps:
	@command -v chromium >/dev/null 2>&1 || { \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; \
	  else echo "chromium is missing: install Debian's 'chromium' package" >&2; exit 1; fi; }

setup: $(VENV)/.installed

demo: setup
	$(BIN)/budgetmix demo --out $(DEMO_OUT)

test: setup system-deps
	$(BIN)/python -m pytest -q

bench: setup
	$(BIN)/python -m pytest benchmarks --benchmark-only -p no:cacheprovider

clean:
	rm -rf $(VENV) $(DEMO_OUT) .benchmarks
