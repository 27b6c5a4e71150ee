"""The in-memory read copy: a long-lived process's pairs table, searched with numpy.

A warm process (the watcher's daemon, the MCP server, an agent's ``Memory``) holds the
latest version of the pairs table in memory (up to ``IN_MEMORY_MAX_ROWS`` rows): the rows
a hit shows, their unit float32 vectors and the postings of their ``terms``. Its searches
are LanceDB's: the exact cosine scan (:mod:`.vectorscan`) and the BM25 of its full-text
index (k1 1.2, b 0.75, whitespace tokens: equal scores), 5x faster than LanceDB's best index
(bench/studies/readcopy-2026-12.md). After a write, the next version's copy reads only
the new rows (:meth:`RecallCopy.updated`). Nothing of it is saved.
"""

from __future__ import annotations

import math
from array import array
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, overload

from wrenmem.index import table as index
from wrenmem.index.readcopy import vectorscan
from wrenmem.sql import labels as sqllabels
from wrenmem.storage import lance

# The columns a hit shows, and ``terms`` (wrenmem's own full-text terms).
COLUMNS = ("id", "path", "question", "sql", "datasource", "dialect", "tags", "source", "meta",
           "terms")
POSITION = {c: n for n, c in enumerate(COLUMNS)}
BM25_K1, BM25_B = 1.2, 0.75  # LanceDB's full-text index uses these
KEPT_FILTERS = 16  # per copy: the rows each filter in use accepts
# per copy: the BM25 parts of the terms searched (rows and each row's share of the score,
# :meth:`RecallCopy.term_scores`), up to this many postings in all (12 bytes each)
KEPT_POSTINGS = 2_000_000
_NOT_HELD = object()
READ_BATCH = 8_192  # rows a copy reads at a time
SHARED = ("sql", "datasource", "dialect", "source", "meta")  # values repeated across rows
UPDATE_MAX_ROWS = 2_000  # a held copy follows a write that changed at most this many rows


class ChainedRows(Sequence[tuple[Any, ...]]):
    """The rows of a copy followed by rows added to it, the first ones not copied."""

    def __init__(self, first: Sequence[tuple[Any, ...]], more: list[tuple[Any, ...]]):
        if isinstance(first, ChainedRows):  # one level, however many times extended
            more = first.more + more
            first = first.first
        self.first: Sequence[tuple[Any, ...]] = first
        self.more: list[tuple[Any, ...]] = more

    def __len__(self) -> int:
        return len(self.first) + len(self.more)

    def _at(self, n: int) -> tuple[Any, ...]:
        size = len(self.first)
        return self.first[n] if n < size else self.more[n - size]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        yield from self.first
        yield from self.more

    @overload
    def __getitem__(self, n: int) -> tuple[Any, ...]: ...

    @overload
    def __getitem__(self, n: slice) -> list[tuple[Any, ...]]: ...

    def __getitem__(self, n: int | slice) -> tuple[Any, ...] | list[tuple[Any, ...]]:
        size = len(self)
        if isinstance(n, slice):
            return [self._at(i) for i in range(*n.indices(size))]
        at = n + size if n < 0 else n
        if not 0 <= at < size:
            raise IndexError(n)
        return self._at(at)


class StackedRows:
    """Two blocks of float32 rows seen as one matrix, the first not copied (200 MB at
    100,000 rows): a row, a list of rows or a slice is read from the blocks; anything else
    (a whole scan) from the two joined once."""

    def __init__(self, first: Any, more: Any):
        import numpy as np

        if isinstance(first, StackedRows):  # one level, however many times extended
            more = np.concatenate([first.more, more])
            first = first.first
        self.first: Any = first
        self.more: Any = more
        self.dtype = first.dtype
        self.shape = (len(first) + len(more), first.shape[1])
        self.ndim = 2
        self._whole: Any = None

    def __len__(self) -> int:
        return self.shape[0]

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        import numpy as np

        if self._whole is None:
            self._whole = np.concatenate([self.first, self.more])
        return self._whole if dtype is None else self._whole.astype(dtype)

    def __getitem__(self, key: Any) -> Any:
        import numpy as np

        size, total = len(self.first), len(self)
        if isinstance(key, (int, np.integer)):
            n = int(key) + (total if int(key) < 0 else 0)
            if not 0 <= n < total:
                raise IndexError(key)
            return self.first[n] if n < size else self.more[n - size]
        if isinstance(key, slice) and key.step in (None, 1):
            start, stop, _step = key.indices(total)
            stop = max(start, stop)
            if stop <= size:
                return self.first[start:stop]
            if start >= size:
                return self.more[start - size:stop - size]
            return np.concatenate([self.first[start:], self.more[:stop - size]])
        if isinstance(key, (list, np.ndarray)):
            picked = np.asarray(key)
            if picked.ndim == 1 and (picked.dtype.kind in "iu" or len(picked) == 0):
                picked = picked.astype(np.int64)
                picked = np.where(picked < 0, picked + total, picked)
                out = np.empty((len(picked), self.shape[1]), dtype=self.dtype)
                low = picked < size
                out[low] = self.first[picked[low]]
                out[~low] = self.more[picked[~low] - size]
                return out
        return np.asarray(self)[key]


def _postings(terms: Sequence[str | None], first: int = 0) -> tuple[array, dict[str, bytes]]:
    """Each row's token count, and per term the (row, count) pairs holding it, as int32s
    (rows numbered from ``first``)."""
    lengths = array("i")
    lists: dict[str, array] = {}
    for n, text in enumerate(terms, first):
        tokens = (text or "").split()
        lengths.append(len(tokens))
        for term, count in Counter(tokens).items():
            entry = lists.get(term)
            if entry is None:
                entry = lists[term] = array("i")
            entry.append(n)
            entry.append(count)
    return lengths, {t: a.tobytes() for t, a in lists.items()}


def _unpacked(raw: bytes) -> tuple[Any, Any]:
    """(rows, counts) of a term's postings, its (row, count) pairs as int32s, as arrays."""
    import numpy as np

    pairs = np.frombuffer(raw, dtype=np.int32).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


class RecallCopy:
    """One version of the pairs table, in memory (see the module docstring)."""

    def __init__(self, model_id: str, rows: Sequence[tuple[Any, ...]], matrix: Any,
                 lengths: array, postings: Mapping[str, bytes], hashes: list[str] | None = None,
                 live: Any = None, labels: Any = None):
        import numpy as np

        self.model_id = model_id
        self.rows = rows  # tuples of the COLUMNS
        self.matrix = matrix  # unit rows, float32
        self.lengths = lengths
        self.postings = postings
        # each row's content hash, when read from the table (what :meth:`updated` needs)
        self.hashes = hashes
        # which rows the table still holds (None: all): an update leaves the rows a
        # write removed in place, out of every search and statistic, until it reads anew
        self.live = live
        # the SQL labels of the first rows (sqllabels.label_matrix), when known: those of
        # the copy this one was made from; label_matrix() makes the rest
        self.labels = labels
        self._length_array: Any = np.frombuffer(lengths, dtype=np.int32)
        self.live_count = len(rows) if live is None else int(np.count_nonzero(live))
        kept = self._length_array if live is None else self._length_array[live]
        self.average_length = float(kept.sum()) / self.live_count if self.live_count else 0.0
        self._scan: vectorscan.VectorScan | None = None
        self._allowed: dict[Any, Any] = {}
        self._by_path: dict[str, list[int]] | None = None
        self._term_scores: dict[str, tuple[Any, Any] | None] = {}
        self._term_postings = 0  # held in _term_scores

    @classmethod
    def from_table(cls, table: Any) -> RecallCopy:
        """The copy of the table's current version (read whole: for small tables), in
        batches of :data:`READ_BATCH` rows: each batch's vectors made unit rows of one
        float32 matrix and its columns Python values, then let go (read at once, the Arrow
        table and a second matrix of the vectors took 1.6 GB at 100,000 rows)."""
        import numpy as np
        import pyarrow as pa

        # only these columns: not the embedded text, read and dropped at once otherwise
        values: list[list[Any]] = [[] for _c in COLUMNS]
        # one string per distinct value of the columns whose values repeat
        shared: list[dict[Any, Any] | None] = [{} if c in SHARED else None for c in COLUMNS]
        hashes: list[str] = []
        blocks: list[Any] = []
        matrix: Any = None
        filled = 0
        expected = table.count_rows()  # (a write meanwhile: read beyond it, joined below)
        reader = (table.search().select([*COLUMNS, "content_hash", "vector"]).limit(None)
                  .to_batches(READ_BATCH))
        for batch in reader:
            unit = lance.unit_vectors(batch)
            if matrix is None:
                matrix = np.empty((max(expected, len(batch)), unit.shape[1]), dtype=np.float32)
            if filled + len(unit) <= len(matrix) and not blocks:
                matrix[filled:filled + len(unit)] = unit
            else:
                blocks.append(unit)
            filled += len(unit)
            for into, column, seen in zip(values, COLUMNS, shared, strict=True):
                got = batch.column(column).to_pylist()
                into.extend(got if seen is None else [seen.setdefault(v, v) for v in got])
            hashes.extend(h or "" for h in batch.column("content_hash").to_pylist())
            del batch, unit
        if matrix is None:
            matrix = np.zeros((0, table.schema.field("vector").type.list_size), dtype=np.float32)
        elif blocks:
            matrix = np.concatenate([matrix[:filled - sum(len(b) for b in blocks)], *blocks])
        elif filled < len(matrix):
            matrix = matrix[:filled].copy()
        del reader, blocks
        pa.default_memory_pool().release_unused()
        lengths, postings = _postings(values[COLUMNS.index("terms")])
        rows = [tuple(r) for r in zip(*values, strict=True)]
        del values
        return cls(index.table_model_id(table) or "", rows, matrix, lengths, postings,
                   hashes=hashes)

    def updated(self, table: Any) -> RecallCopy | None:
        """The copy of ``table``'s current version made from this one (of an earlier
        version) by reading only the rows whose (id, content hash) is new; the ones gone
        stay in place, not live. None when it cannot say (no hashes, another model) or
        reading whole is the better deal (many rows changed or left behind)."""
        import numpy as np

        if self.hashes is None or index.table_model_id(table) != self.model_id:
            return None
        wanted = Counter((i, h) for i, hs in index.read_ids(table).items() for h in hs)
        at_id = POSITION["id"]
        live = (np.ones(len(self.rows), dtype=bool) if self.live is None
                else self.live.copy())
        for n in np.flatnonzero(live).tolist():
            key = (self.rows[n][at_id], self.hashes[n])
            if wanted.get(key, 0) > 0:
                wanted[key] -= 1  # this row is still there, as it was
            else:
                live[n] = False
        missing = +wanted  # (id, hash) -> how many rows of it to read
        if sum(missing.values()) > UPDATE_MAX_ROWS or (
                len(self.rows) - int(np.count_nonzero(live)) > len(self.rows) // 4):
            return None
        rows: list[tuple[Any, ...]] = []
        hashes: list[str] = []
        vectors = []
        for chunk in lance.chunked(sorted({i for i, _h in missing})):
            found = (table.search().where(lance.in_filter("id", chunk))
                     .select([*COLUMNS, "content_hash", "vector"]).limit(None).to_arrow())
            values = [found.column(c).to_pylist() for c in COLUMNS]
            found_hashes = [h or "" for h in found.column("content_hash").to_pylist()]
            matrix = lance.unit_vectors(found)
            for n, row in enumerate(zip(*values, strict=True)):
                key = (row[at_id], found_hashes[n])
                if missing.get(key, 0) > 0:
                    missing[key] -= 1
                    rows.append(tuple(row))
                    hashes.append(found_hashes[n])
                    vectors.append(matrix[n])
        if +missing:  # written again between our two reads: read it all, consistently
            return None
        return self.with_rows(live, rows, hashes, vectors)

    def with_rows(self, live: Any, rows: Sequence[tuple[Any, ...]], hashes: list[str] | None,
                  vectors: Sequence[Any]) -> RecallCopy:
        """This copy with its ``live`` rows (a boolean array) and ``rows`` (their ``hashes``
        and unit float32 ``vectors``) added at the end, its postings and scan extended."""
        import numpy as np

        first = len(self.rows)
        lengths = array("i", self.lengths)
        postings: dict[str, bytes] = dict(self.postings)
        new_lengths, new_postings = _postings([r[POSITION["terms"]] for r in rows], first)
        lengths.extend(new_lengths)
        for term, raw in new_postings.items():
            postings[term] = postings.get(term, b"") + raw
        added = (np.vstack(vectors).astype(np.float32) if len(vectors)
                 else np.zeros((0, self.matrix.shape[1]), dtype=np.float32))
        live = np.concatenate([live, np.ones(len(rows), dtype=bool)])
        kept = (self.hashes + hashes if self.hashes is not None and hashes is not None
                else None)
        copy = RecallCopy(self.model_id, ChainedRows(self.rows, list(rows)),
                          StackedRows(self.matrix, added), lengths, postings,
                          hashes=kept, live=None if live.all() else live,
                          labels=self.labels)
        copy._scan = self.scan().extended(copy.matrix)
        return copy

    def __len__(self) -> int:
        return self.live_count

    def row(self, n: int, columns: Sequence[str]) -> dict[str, Any]:
        values = self.rows[n]
        return {c: values[POSITION[c]] for c in columns}

    def bm25_arrays(self, terms: Sequence[str], allowed: Any = None) -> tuple[Any, Any]:
        """(rows in order, their BM25 scores) of the rows holding any of ``terms``, among the
        ``allowed`` rows (a boolean array; None: all), with every row's statistics: the
        float64 operations of LanceDB's formula, so the scores equal its scores."""
        import numpy as np

        total = np.zeros(len(self.rows), dtype=np.float64)
        touched = np.zeros(len(self.rows), dtype=bool)
        for term in dict.fromkeys(terms):
            found = self.term_scores(term)
            if found is None:
                continue
            rows, part = found
            if allowed is not None:
                keep = allowed[rows]
                rows, part = rows[keep], part[keep]
            total[rows] += part
            touched[rows] = True
        hit = np.flatnonzero(touched)
        return hit, total[hit]

    def term_scores(self, term: str) -> tuple[Any, Any] | None:
        """(the live rows holding ``term``, each one's share of a BM25 score for it), or
        None; each depends on its row and the copy's statistics alone, so they are kept
        per copy and term (up to ``KEPT_POSTINGS``)."""
        import numpy as np

        held = self._term_scores.get(term, _NOT_HELD)  # (one get: another thread may clear)
        if held is not _NOT_HELD:
            return held  # type: ignore[return-value]
        raw = self.postings.get(term)
        found: tuple[Any, Any] | None = None
        if raw is not None:
            rows, counts = _unpacked(raw)
            tf = counts.astype(np.float64)
            if self.live is not None:  # rows a write removed count nowhere
                kept = self.live[rows]
                rows, tf = rows[kept], tf[kept]
            count, average = self.live_count, self.average_length or 1.0
            idf = math.log(1.0 + (count - len(rows) + 0.5) / (len(rows) + 0.5))
            norm = BM25_K1 * (1.0 - BM25_B + BM25_B * self._length_array[rows] / average)
            found = (rows, idf * tf * (BM25_K1 + 1.0) / (tf + norm))
        size = 0 if found is None else len(found[0])
        if self._term_postings + size > KEPT_POSTINGS:
            self._term_scores.clear()
            self._term_postings = 0
        self._term_scores[term] = found
        self._term_postings += size
        return found

    def label_matrix(self) -> Any:
        """:func:`wrenmem.sql.labels.label_matrix` of every row's SQL (removed rows
        included), made once per copy; the labels of the copy it was made from are kept."""
        import numpy as np

        held = self.labels
        if held is not None and len(held) == len(self.rows):
            return held
        at = POSITION["sql"]
        more = (self.rows[len(held):] if held is not None else self.rows)
        made = sqllabels.label_matrix(r[at] or "" for r in more)
        if held is not None:
            made = np.concatenate([held, made])
        self.labels = made
        return made

    def scan(self) -> vectorscan.VectorScan:
        """The exact nearest-row search over :attr:`matrix` (made once per copy)."""
        if self._scan is None:
            self._scan = vectorscan.VectorScan(self.matrix)
        return self._scan

    def allowed_by(self, key: Any, accepts: Callable[[tuple[Any, ...]], bool]) -> Any:
        """The boolean array of the live rows ``accepts`` takes, made once per ``key`` (a
        filter; the last KEPT_FILTERS are kept)."""
        import numpy as np

        found = self._allowed.get(key)
        if found is None:
            if len(self._allowed) >= KEPT_FILTERS:
                self._allowed.pop(next(iter(self._allowed)))
            found = np.fromiter((accepts(r) for r in self.rows), dtype=bool,
                                count=len(self.rows))
            if self.live is not None:
                found &= self.live
            self._allowed[key] = found
        return found

    def rows_of(self, phrasings: Iterable[tuple[str, str]]) -> list[int]:
        """The rows (removed ones included) of these (path, question) pairs: what a
        left-out filter takes away, found through the rows of each path (an index made
        once per copy), so a leave-one-out search costs no pass over every row."""
        by_path = self._by_path
        if by_path is None:
            by_path = {}
            at = POSITION["path"]
            for n, row in enumerate(self.rows):
                by_path.setdefault(row[at], []).append(n)
            self._by_path = by_path
        at = POSITION["question"]
        return [n for path, question in phrasings for n in by_path.get(path, ())
                if self.rows[n][at] == question]
