"""The ANN index of the LanceDB adapter: built once past a row threshold, and searches with
it find what an exact scan finds."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wrenmem.storage import lance


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


def test_an_index_trained_on_fewer_vectors_finds_what_an_exact_scan_finds(
        tmp_path: Path) -> None:
    """The pairs table's IVF_FLAT trains on PAIRS_IVF_SAMPLE_RATE vectors a partition: with
    141 partitions of 20,000 rows, k-means sees fewer than half of them."""
    table = _table(tmp_path, 20_000)
    assert lance.ensure_vector_index(table, min_rows=1000,
                                     sample_rate=lance.PAIRS_IVF_SAMPLE_RATE)
    data = table.search().select(["vector"]).limit(None).to_arrow().column("vector")
    overlap = []
    for n in range(0, 20_000, 400):
        v = data[n].as_py()
        ann = lance.nearest(table, v).limit(10).select(["id", "_distance"]).to_list()
        exact = (table.search(v).distance_type("cosine").bypass_vector_index().limit(10)
                 .select(["id", "_distance"]).to_list())
        overlap.append(len({r["id"] for r in ann} & {r["id"] for r in exact}) / 10)
    assert sum(overlap) / len(overlap) >= 0.98


def _vectors(table: object) -> list[list[float]]:
    return table.search().select(["vector"]).limit(None).to_arrow().column("vector").to_pylist()


def test_past_the_pq_threshold_the_index_is_ivf_pq(tmp_path: Path) -> None:
    table = _table(tmp_path, 3000)
    assert lance.ensure_vector_index(table, min_rows=1000, pq_rows=2000)
    assert lance.vector_index_kind(table) == "IVF_PQ"
    stats = table.index_stats(table.list_indices()[0].name)
    assert stats.num_indexed_rows == 3000
    assert not lance.ensure_vector_index(table, min_rows=1000, pq_rows=2000)  # once


def test_an_ivf_flat_index_grown_past_the_threshold_becomes_ivf_pq(tmp_path: Path) -> None:
    table = _table(tmp_path, 3000)
    assert lance.ensure_vector_index(table, min_rows=1000, pq_rows=5000)
    assert lance.vector_index_kind(table) == "IVF_FLAT"
    assert not lance.ensure_vector_index(table, min_rows=1000, pq_rows=5000)
    assert lance.ensure_vector_index(table, min_rows=1000, pq_rows=3000)  # the table grew
    assert lance.vector_index_kind(table) == "IVF_PQ"
    assert len(table.list_indices()) == 1


def test_a_pq_search_ranks_by_exact_distances_as_a_scan_does(tmp_path: Path) -> None:
    """The fast path (IVF_PQ codes, then the refine by the stored vectors) against the full
    one (every row, exact cosine): the same rows with the same distances, nearly always."""
    table = _table(tmp_path, 3000)
    lance.ensure_vector_index(table, min_rows=1000, pq_rows=2000)
    vectors = _vectors(table)
    overlap, off = [], 0
    for n in range(0, 3000, 60):
        query = (np.asarray(vectors[n]) + 0.05).tolist()  # near a row, not on it
        ann = lance.nearest(table, query).limit(10).select(["id", "_distance"]).to_list()
        exact = (table.search(query).distance_type("cosine").bypass_vector_index().limit(10)
                 .select(["id", "_distance"]).to_list())
        want = {r["id"]: r["_distance"] for r in exact}
        overlap.append(len({r["id"] for r in ann} & set(want)) / 10)
        off += sum(abs(r["_distance"] - want[r["id"]]) > 1e-5 for r in ann if r["id"] in want)
    # the PQ codebooks are trained by k-means from a random sample, so the overlap varies
    # from build to build: 0.950-0.978 in seven builds (a bound of 0.95 failed one CI run)
    assert sum(overlap) / len(overlap) >= 0.9
    assert off == 0  # refined: exact distances, not the PQ codes' approximations


def test_the_setting_reaches_the_sync(tmp_path: Path) -> None:
    """``ivf_pq_rows`` (here 300) decides the index a sync builds, at a small scale."""
    from tests.conftest import write_pair
    from tests.fakes import RecordingEmbedder
    from wrenmem.index import table as index
    from wrenmem.index.sync import sync_pairs
    from wrenmem.settings import load_settings

    root = tmp_path / "p"
    (root / "knowledge" / "sql").mkdir(parents=True)
    for i in range(320):
        write_pair(root, f"knowledge/sql/q{i:03d}.md", f"how many orders in region {i} "
                   f"for product {i % 7} and channel {i % 11}", f"SELECT {i}")
    settings = load_settings(root, environ={"WRENMEM_IVF_PQ_ROWS": "300"})
    assert settings.ivf_pq_rows == 300
    sync_pairs(settings, embedder=RecordingEmbedder(dim=64))
    table = index.open_table(index.connect(settings))
    assert lance.vector_index_kind(table) == "IVF_PQ"
    default = load_settings(root, environ={})
    assert default.ivf_pq_rows == lance.ANN_PQ_ROWS
