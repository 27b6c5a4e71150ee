"""The ANN index of the LanceDB adapter: built once past a row threshold, and searches with
it find what an exact scan finds."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wrenmem import lance


def _table(tmp_path: Path, rows: int) -> object:
    import pyarrow as pa

    rng = np.random.default_rng(7)
    centres = rng.standard_normal((20, 32))
    vectors = centres[rng.integers(0, 20, rows)] + 0.3 * rng.standard_normal((rows, 32))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    data = pa.table({"id": [f"r{i}" for i in range(rows)],
                     "vector": pa.FixedSizeListArray.from_arrays(
                         pa.array(vectors.astype(np.float32).reshape(-1)), 32)})
    return lance.connect(str(tmp_path / "db")).create_table("t", data)


def test_index_built_once_past_the_threshold(tmp_path: Path) -> None:
    table = _table(tmp_path, 3000)
    assert not lance.ensure_vector_index(table, min_rows=5000)
    assert not lance.has_index(table, "vector")
    assert lance.ensure_vector_index(table, min_rows=2000)
    assert lance.has_index(table, "vector")
    assert not lance.ensure_vector_index(table, min_rows=2000)  # already there


def test_indexed_search_finds_what_an_exact_scan_finds(tmp_path: Path) -> None:
    table = _table(tmp_path, 3000)
    lance.ensure_vector_index(table, min_rows=1000)
    data = table.search().select(["vector"]).limit(None).to_arrow().column("vector")
    overlap = []
    for n in range(0, 3000, 60):
        v = data[n].as_py()
        ann = table.search(v).distance_type("cosine").nprobes(lance.ANN_NPROBES).limit(10)
        exact = table.search(v).distance_type("cosine").bypass_vector_index().limit(10)
        got = {r["id"] for r in ann.select(["id", "_distance"]).to_list()}
        want = {r["id"] for r in exact.select(["id", "_distance"]).to_list()}
        overlap.append(len(got & want) / 10)
    assert sum(overlap) / len(overlap) >= 0.98
