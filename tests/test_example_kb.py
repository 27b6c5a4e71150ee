"""The bundled example knowledge base: every pair is valid and grep recall finds them."""

from __future__ import annotations

import json

from tests.conftest import EXAMPLE_KNOWLEDGE, REPO
from wrenmem.pairs.catalog import scan
from wrenmem.recall.bm25f import GrepBackend
from wrenmem.recall.hits import Filters
from wrenmem.settings import load_settings
from wrenmem.sql.check import check_sql


def test_every_example_pair_is_valid_and_canonical() -> None:
    from wrenmem.pairs.pairfile import render_pair

    found = scan(load_settings(REPO), use_cache=False)
    assert found.errors == ()
    assert len(found.pairs) >= 40
    assert sum(1 for p in found.pairs if not p.nl.isascii()) >= 15  # Chinese questions
    for pair in found.pairs:
        assert check_sql(pair.sql, pair.dialect) == [], pair.path
        assert (REPO / pair.path).read_text(encoding="utf-8") == render_pair(pair), pair.path


def test_grep_finds_same_language_paraphrases_first() -> None:
    items = [i for i in json.loads((EXAMPLE_KNOWLEDGE / "eval.json").read_text())
             if i["expected"] is not None and not i.get("cross_language")]
    results = GrepBackend(load_settings(REPO)).search([i["question"] for i in items], 1, Filters())
    misses = [i["question"] for i, hits in zip(items, results, strict=True)
              if not hits or hits[0].path != i["expected"]]
    assert misses == []
