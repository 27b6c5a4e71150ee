"""The int8 vector scan returns exactly the float32 scan's rows, order and cosines (and
LanceDB's exact search's), proving it per question or scanning everything."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from wrenmem.index.readcopy import vectorscan
from wrenmem.index.readcopy.vectorscan import VectorScan, exact_cosines


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


def _embeddings(n: int, dim: int = 64, seed: int = 7) -> np.ndarray:
    """Clustered unit vectors, as sentence embeddings are: topics, and variants of each."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((40, dim))
    return _unit(centres[rng.integers(0, 40, n)] + 0.6 * rng.standard_normal((n, dim)))


def _unit_query(query: np.ndarray) -> np.ndarray:
    """The question's unit vector as the scan makes it (float32, then divided)."""
    query = np.asarray(query, dtype=np.float32)
    return query / float(np.linalg.norm(query))


def _float32_answer(matrix: np.ndarray, query: np.ndarray, depth: int,
                    allowed: np.ndarray | None = None) -> tuple[list[int], list[float]]:
    """The plain scan: every cosine, best first, ties by row number."""
    cosines = exact_cosines(matrix, _unit_query(query))
    rows = range(len(matrix)) if allowed is None else np.flatnonzero(allowed).tolist()
    order = sorted(rows, key=lambda n: (-float(cosines[n]), n))[:depth]
    return order, [float(cosines[n]) for n in order]


@pytest.fixture(autouse=True)
def _int8_from_the_first_row(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("simsimd")
    monkeypatch.setattr(vectorscan, "MIN_ROWS", 0)


def test_the_int8_scan_answers_what_the_float32_scan_answers() -> None:
    matrix = _embeddings(4000)
    rng = np.random.default_rng(11)
    scan = VectorScan(matrix)
    queries = [matrix[n] + 0.3 * rng.standard_normal(matrix.shape[1])
               for n in rng.integers(0, len(matrix), 150)]
    queries += [rng.standard_normal(matrix.shape[1]) for _ in range(50)]
    for query in queries:
        for depth in (1, 10, 50):
            rows, cosines = scan.nearest(query, depth)
            assert (rows.tolist(), cosines.tolist()) == _float32_answer(matrix, query, depth)
    assert scan.proved > 0.9 * 600  # the int8 candidates answered (nearly) every one
    assert scan._quantized is not None and scan._quantized[0].dtype == np.int8


def test_filtered_rows_are_never_returned_and_the_rest_rank_as_in_the_full_scan() -> None:
    matrix = _embeddings(3000, seed=3)
    allowed = np.random.default_rng(5).random(len(matrix)) < 0.3
    scan = VectorScan(matrix)
    for n in range(0, 3000, 50):
        rows, cosines = scan.nearest(matrix[n], 50, allowed)
        assert (rows.tolist(), cosines.tolist()) == _float32_answer(matrix, matrix[n], 50,
                                                                    allowed)
    few = np.zeros(len(matrix), dtype=bool)
    few[[5, 17, 2999]] = True
    rows, _ = scan.nearest(matrix[0], 50, few)
    assert sorted(rows.tolist()) == [5, 17, 2999]


def test_near_ties_at_the_cut_fall_back_to_the_float32_scan_with_ties_by_key() -> None:
    rng = np.random.default_rng(1)
    base = _embeddings(2000, seed=9)
    twin = base[0] + 1e-4 * rng.standard_normal((600, base.shape[1]))  # 600 near-copies
    matrix = _unit(np.vstack([base, twin]))
    matrix[-100:] = matrix[-101]  # and 101 exact copies: ties broken by the key
    scan = VectorScan(matrix)
    names = {n: f"pair-{(7919 * n) % len(matrix):05d}" for n in range(len(matrix))}
    rows, cosines = scan.nearest(base[0], 50, key=names.__getitem__)
    assert scan.rescanned == 1  # the bound cannot separate 600 near-equal rows
    cosine = exact_cosines(matrix, _unit_query(base[0]))
    want = sorted(range(len(matrix)), key=lambda n: (-float(cosine[n]), names[n]))[:50]
    assert rows.tolist() == want and cosines.tolist() == [float(cosine[n]) for n in want]
    rows, _ = scan.nearest(matrix[-1], 120, key=names.__getitem__)
    copies = sorted(range(len(matrix) - 101, len(matrix)), key=names.__getitem__)
    assert rows.tolist()[:101] == copies


def test_the_answers_are_lancedbs_exact_search(tmp_path: Path) -> None:
    lancedb = pytest.importorskip("lancedb")
    import pyarrow as pa

    matrix = _embeddings(3000, dim=96, seed=21)
    ids = [f"row-{n:05d}" for n in range(len(matrix))]
    db = lancedb.connect(tmp_path / "db")
    table = db.create_table("t", pa.table({
        "id": ids, "vector": pa.FixedSizeListArray.from_arrays(
            pa.array(matrix.reshape(-1)), matrix.shape[1])}))
    scan = VectorScan(matrix)
    rng = np.random.default_rng(2)
    for n in rng.integers(0, len(matrix), 60):
        query = matrix[n] + 0.4 * rng.standard_normal(matrix.shape[1]).astype(np.float32)
        theirs = (table.search(query).distance_type("cosine").bypass_vector_index()
                  .limit(50).select(["id", "_distance"]).to_list())
        rows, cosines = scan.nearest(query, 50, key=ids.__getitem__)
        assert [ids[r] for r in rows] == [r["id"] for r in theirs]
        assert cosines.tolist() == pytest.approx([1 - r["_distance"] for r in theirs],
                                                 abs=2e-6)
    assert scan.proved > 50


def _prefixed(matrix: np.ndarray, monkeypatch: pytest.MonkeyPatch, dims: int = 24
              ) -> VectorScan:
    monkeypatch.setattr(vectorscan, "PREFIX_DIMS", dims)
    scan = VectorScan(matrix)
    assert scan.make_prefix(wait=True) is not None
    return scan


def test_the_prefix_codes_bound_every_rows_float32_cosine(
        monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = _embeddings(3000, dim=96, seed=4)
    scan = _prefixed(matrix, monkeypatch, dims=32)
    assert scan._prefix is not None
    rng = np.random.default_rng(8)
    for query in [*matrix[:40], *rng.standard_normal((40, 96))]:
        query = _unit_query(query)
        reach = scan._prefix.reach(query)
        cosines = exact_cosines(matrix, query)
        assert (cosines <= reach).all()
        assert float(np.median(reach - cosines)) < 0.5  # a bound that prunes
    # the rotation is orthonormal to float32 precision, its columns the main directions
    rotation = scan._prefix.rotation.astype(np.float64)
    assert np.allclose(rotation.T @ rotation, np.eye(32), atol=1e-5)
    share = np.linalg.norm(matrix @ scan._prefix.rotation, axis=1) ** 2
    assert float(share.mean()) > 32 / 96 + 0.1  # more than a random third of the length


def test_the_prefix_scan_answers_what_the_float32_scan_answers(
        monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = _embeddings(5000, dim=64, seed=12)
    scan = _prefixed(matrix, monkeypatch)
    rng = np.random.default_rng(13)
    queries = [matrix[n] + 0.3 * rng.standard_normal(64) for n in rng.integers(0, 5000, 120)]
    queries += [rng.standard_normal(64) for _ in range(30)]
    allowed = rng.random(len(matrix)) < 0.4
    for query in queries:
        for depth in (1, 10, 50):
            rows, cosines = scan.nearest(query, depth)
            assert (rows.tolist(), cosines.tolist()) == _float32_answer(matrix, query, depth)
        rows, cosines = scan.nearest(query, 50, allowed)
        assert (rows.tolist(), cosines.tolist()) == _float32_answer(matrix, query, 50,
                                                                    allowed)
    assert scan.prefixed > 0.8 * 600  # the prefix answered (nearly) every one


def test_the_prefix_scan_reads_every_row_its_bound_cannot_rule_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows whose length lies beyond the prefix directions: the candidates by bound miss
    some of the best, which only the second pass (every row the bound cannot exclude)
    finds; with too many such rows the int8 scan answers instead."""
    rng = np.random.default_rng(3)
    base = _embeddings(4000, dim=64, seed=5)
    scan = _prefixed(base, monkeypatch, dims=16)
    assert scan._prefix is not None
    directions = scan._prefix.rotation.astype(np.float64)
    # rows made orthogonal to the prefix directions, near one query
    query = _unit_query(rng.standard_normal(64))
    hidden = query + 0.05 * rng.standard_normal((400, 64))
    hidden -= (hidden @ directions) @ directions.T
    matrix = _unit(np.vstack([base, hidden]))
    scan = VectorScan(matrix)
    scan._prefix = vectorscan.PrefixCodes.build(base, 16).extended(matrix[4000:])
    for depth in (10, 50):
        rows, cosines = scan.nearest(query, depth)
        assert (rows.tolist(), cosines.tolist()) == _float32_answer(matrix, query, depth)
    assert scan.prefixed == 2
    monkeypatch.setattr(vectorscan, "EXTRA_MAX", 10)  # too many rows left to re-score
    rows, cosines = scan.nearest(query, 50)
    assert (rows.tolist(), cosines.tolist()) == _float32_answer(matrix, query, 50)
    assert scan.prefixed == 2 and scan.proved + scan.rescanned == 3


def test_an_extended_scan_extends_its_prefix_codes(monkeypatch: pytest.MonkeyPatch) -> None:
    matrix = _embeddings(3000, dim=64, seed=30)
    scan = _prefixed(matrix[:2000], monkeypatch)
    scan.int8()
    grown = scan.extended(matrix)
    assert grown._prefix is not None and len(grown._prefix) == 3000
    # made as make_prefix makes them, with one BLAS thread: OpenBLAS does not promise the
    # same last bits for another thread count on every CPU (the codes would still be
    # exact bounds of their own rotation, but not these bytes)
    with vectorscan._one_blas_thread():
        again = vectorscan.PrefixCodes.build(matrix[:2000], 24).extended(matrix[2000:])
    assert np.array_equal(grown._prefix.ints, again.ints)
    for n in range(0, 3000, 97):
        rows, cosines = grown.nearest(matrix[n], 20)
        assert (rows.tolist(), cosines.tolist()) == _float32_answer(matrix, matrix[n], 20)
    assert grown.prefixed == len(range(0, 3000, 97))


class _Keys:
    """A tie-break key that records the rows it was asked for."""

    def __init__(self, names: dict[int, str]):
        self.names, self.asked = names, 0

    def __call__(self, m: int) -> str:
        self.asked += 1
        return self.names[m]


@pytest.mark.parametrize("seed", range(4))
def test_best_orders_as_a_sort_by_score_then_key(seed: int) -> None:
    """``best`` sorts with numpy and asks for a key only among equal scores: the same
    positions as sorting every candidate by (score, key), many ties and -inf included."""
    rng = np.random.default_rng(seed)
    for _ in range(400):
        n = int(rng.integers(1, 200))
        scores = rng.integers(0, int(rng.integers(1, 12)), n).astype(
            np.float32 if seed % 2 else np.float64)
        scores[rng.random(n) < 0.15] = -np.inf
        numbers = rng.permutation(3 * n)[:n]
        key = _Keys({int(m): f"{int(rng.integers(0, 30)):02d}-{int(m)}" for m in numbers})
        depth = int(rng.integers(1, 60))
        by_number = sorted(range(n), key=lambda p: (-float(scores[p]), int(numbers[p])))
        by_key = sorted(range(n), key=lambda p: (-float(scores[p]),
                                                 key.names[int(numbers[p])]))
        assert vectorscan.best(scores, numbers, depth, None).tolist() == by_number[:depth]
        assert vectorscan.best(scores, numbers, depth, key).tolist() == by_key[:depth]
        assert key.asked <= n
    distinct = _Keys({n: str(n) for n in range(100)})
    got = vectorscan.best(np.arange(100, dtype=np.float64), np.arange(100), 5, distinct)
    assert got.tolist() == [99, 98, 97, 96, 95] and distinct.asked == 0  # no ties, no key
