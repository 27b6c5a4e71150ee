"""``rank_rows`` (a Pair made only for the rows of the answers kept) gives exactly the hits
of ``rank`` over every row's Pair: same answers, order, scores and twins."""

from __future__ import annotations

import json
import random

import pytest

from wrenmem.index.table import row_pair
from wrenmem.recall.hits import rank
from wrenmem.recall.vector import rank_rows


def _rows(rng: random.Random, n: int) -> list[dict]:
    sqls = ["SELECT 1", "select  1;", "SELECT name FROM t WHERE x = 'A'",
            "SELECT name FROM t WHERE x = 'a'", "", "  ", "SELECT COUNT(*) FROM orders"]
    rows = []
    for i in range(n):
        meta = {"created_at": "2026-01-01"} if rng.random() < 0.5 else {}
        if rng.random() < 0.2:
            meta["verified"] = True
        rows.append({"id": f"id{i}", "path": f"knowledge/sql/{rng.randrange(n)}-{i}.md",
                     "question": f"question {rng.randrange(5)}", "sql": rng.choice(sqls),
                     "datasource": rng.choice([None, "", "shop", "crm"]),
                     "dialect": rng.choice([None, "duckdb"]), "tags": ["kpi"][:rng.randrange(2)],
                     "source": rng.choice([None, "user", "seed", "import"]),
                     "meta": json.dumps(meta)})
    return rows


@pytest.mark.parametrize("seed", range(5))
def test_rank_rows_is_rank_of_every_pair(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(300):
        rows = _rows(rng, rng.randrange(0, 40))
        levels = [rng.choice([0.1, 0.5, 0.5, 0.8, 1.0]) for _ in rows]  # many ties
        scored = [(s, r, rng.choice([None, s * 3])) for s, r in zip(levels, rows, strict=True)]
        k = rng.randrange(0, 8)
        want = rank([(s, row_pair(r), raw) for s, r, raw in scored], k, "hybrid")
        got = rank_rows(scored, k, "hybrid")
        assert [h.to_dict() for h in got] == [h.to_dict() for h in want]
