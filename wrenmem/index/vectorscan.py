"""The exact nearest rows of a matrix of unit vectors, found through an int8 copy of it.

A cosine scan of 100,000 float32 vectors of 512 dimensions reads 200 MB per question; an
int8 copy of the same rows is a quarter of that, and SimSIMD's int8 dot products (AVX-512
VNNI where the CPU has it) scan it several times faster than numpy scans the float32 rows.
The int8 scores only choose candidates: the rows returned, their order and their cosines
are those of the float32 scan, and this is proved for every question, not hoped for.

Each row ``x`` is stored as ``s_x * xi`` (``xi`` int8, ``s_x`` its largest magnitude / 127)
with the length of its rounding error ``e_x``; the question ``q`` likewise as ``s_q * qi``
with error ``e_q``. Then ``|q.x - s_q s_x (qi.xi)| <= s_q |qi| |e_x| + |e_q|`` (``x`` has unit
length). The float32 cosines of the best ``CANDIDATES`` rows by int8 score are computed;
when no other row's bound reaches the ``depth``-th of those cosines, no other row can be
among the ``depth`` best, so the answer is exactly the float32 scan's. When the bound does
not prove it (many near-equal rows at the cut), the whole float32 matrix is scanned.

Without SimSIMD installed (or for fewer than ``MIN_ROWS`` rows) the float32 scan answers.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MIN_ROWS = 20_000  # below this the float32 scan takes a few milliseconds: no int8 copy
CANDIDATES = 256  # rows re-scored in float32 per question (at least 4 x depth)
SLACK = 1e-5  # float32 rounding of the cosines themselves, beyond the proved bound


def _simsimd() -> Any:
    try:
        import simsimd
    except ImportError:
        return None
    return simsimd


def exact_cosines(matrix: Any, query: Any) -> Any:
    """Every row's cosine to ``query`` (a unit vector): einsum, not BLAS, so one thread
    (on a busy machine that beats waiting for several) and each row's dot product summed
    in the same order whichever rows are asked for."""
    import numpy as np

    return np.einsum("ij,j->i", matrix, query)


def quantize(matrix: Any) -> tuple[Any, Any, Any]:
    """(int8 rows, each row's scale, each row's rounding error length) of ``matrix``."""
    import numpy as np

    peak = np.abs(matrix).max(axis=1) if len(matrix) else np.zeros(0, dtype=np.float32)
    scale = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
    ints = np.rint(matrix / scale[:, None]).clip(-127, 127).astype(np.int8)
    error = np.linalg.norm(matrix - ints.astype(np.float32) * scale[:, None], axis=1)
    return ints, scale, error.astype(np.float32)


class VectorScan:
    """The nearest rows of ``matrix`` (unit float32 rows) to a question, as the float32
    scan finds them; ``proved`` and ``rescanned`` count how each search was answered."""

    def __init__(self, matrix: Any, quantized: tuple[Any, Any, Any] | None = None):
        self.matrix = matrix
        self._quantized = quantized  # (int8 rows, scales, errors): made when first needed
        self.proved = 0  # searches answered from the int8 candidates
        self.rescanned = 0  # searches whose bound did not hold: the float32 scan answered

    def extended(self, matrix: Any) -> VectorScan:
        """The scan of ``matrix``: this scan's rows followed by new ones (their int8 copy
        made from the new rows alone, when this one has it)."""
        import numpy as np

        scan = VectorScan(matrix)
        if self._quantized is not None:
            ints, scale, error = quantize(matrix[len(self.matrix):])
            old_ints, old_scale, old_error = self._quantized
            scan._quantized = (np.concatenate([old_ints, ints]),
                               np.concatenate([old_scale, scale]),
                               np.concatenate([old_error, error]))
        return scan

    def int8(self) -> tuple[Any, Any, Any] | None:
        """The int8 copy (:func:`quantize`), made now if the scan would use it; or None."""
        if self._quantized is None:
            if len(self.matrix) < MIN_ROWS or _simsimd() is None:
                return None
            self._quantized = quantize(self.matrix)
        return self._quantized

    def nearest(self, query: Any, depth: int, allowed: Any = None,
                key: Callable[[int], Any] | None = None) -> tuple[Any, Any]:
        """(row numbers, their cosines): the ``depth`` rows of highest cosine to ``query``
        among the ``allowed`` ones (a boolean array; None: all), best first; equal cosines
        in order of ``key(row number)`` (else lower row first)."""
        import numpy as np

        query = np.asarray(query, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if norm > 0:
            query = query / norm
        count = len(self.matrix) if allowed is None else int(np.count_nonzero(allowed))
        depth = min(depth, count)
        if depth <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        quantized = self.int8()
        if quantized is not None and depth * 4 <= CANDIDATES < count:
            found = self._through_int8(quantized, query, depth, allowed, key)
            if found is not None:
                self.proved += 1
                return found
            self.rescanned += 1
        cosines = exact_cosines(self.matrix, query)
        if allowed is not None:
            cosines = np.where(allowed, cosines, -np.inf)
        top = best(cosines, np.arange(len(cosines)), depth, key)
        return top, cosines[top]

    def _through_int8(self, quantized: tuple[Any, Any, Any], query: Any, depth: int,
                      allowed: Any, key: Callable[[int], Any] | None) -> tuple[Any, Any] | None:
        import numpy as np

        ints, scale, error = quantized
        peak = float(np.abs(query).max())
        q_scale = peak / 127.0 if peak > 0 else 1.0
        q_ints = np.rint(query / q_scale).clip(-127, 127).astype(np.int8)
        q_error = float(np.linalg.norm(query - q_ints.astype(np.float32) * q_scale))
        dots = np.asarray(_simsimd().cdist(ints, q_ints[None, :], metric="dot",
                                           dtype="int8", threads=1)).reshape(-1)
        approx = dots * (scale * q_scale)
        # the most each row's cosine can exceed its int8 estimate
        reach = approx + (q_scale * float(np.linalg.norm(q_ints.astype(np.float32)))
                          * error + q_error + SLACK)
        if allowed is not None:
            approx = np.where(allowed, approx, -np.inf)
            reach = np.where(allowed, reach, -np.inf)
        candidates = np.argpartition(-approx, CANDIDATES - 1)[:CANDIDATES]
        cosines = exact_cosines(self.matrix[candidates], query)
        if allowed is not None:
            cosines = np.where(allowed[candidates], cosines, -np.inf)
        order = best(cosines, candidates, depth, key)
        chosen = cosines[order]
        cut = float(chosen[-1])
        if cut == -np.inf:
            return None
        reach[candidates] = -np.inf  # the candidates' own cosines are known
        if float(reach.max()) >= cut:
            return None
        return candidates[order], chosen


def best(scores: Any, numbers: Any, depth: int, key: Callable[[int], Any] | None) -> Any:
    """Positions in ``scores`` of the ``depth`` highest, best first; equal scores in order
    of ``key(numbers[position])`` (else of the number): an order that does not depend on
    where a row happens to sit."""
    import numpy as np

    depth = min(depth, len(scores))
    if depth <= 0:
        return np.zeros(0, dtype=np.int64)
    top = np.argpartition(-scores, depth - 1)[:depth]
    tied = np.flatnonzero(scores >= scores[top].min())  # every one tying the last one in
    if key is None:
        order = sorted(tied.tolist(), key=lambda n: (-float(scores[n]), int(numbers[n])))
    else:
        order = sorted(tied.tolist(), key=lambda n: (-float(scores[n]), key(int(numbers[n]))))
    return np.asarray(order[:depth], dtype=np.int64)
