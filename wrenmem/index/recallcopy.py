"""The recall copy: what a one-shot recall needs from the pairs table, in one file.

``import lancedb`` alone costs a one-question ``wrenmem recall`` process two to three
seconds, more than the search. So after each write, the writer (sync, under the index lock)
also saves ``.wrenmem/recall-copy.bin``: the rows recall shows, where the table's own data
files hold their float32 vectors (:mod:`wrenmem.index.tablevectors`: not saved twice), the
vector scan's prefix codes past ``vectorscan.MIN_ROWS`` rows, the full-text postings of
their ``terms`` column and the labels of their SQL (:mod:`wrenmem.sql.labels`, what the form
reader counts: mapped, not lexed again by every process). A process that has not opened
LanceDB answers from it with numpy alone: the same exact cosine scan as LanceDB's flat
search, and the same BM25 as LanceDB's full-text index over the same terms (k1 1.2, b 0.75,
whitespace tokens: scores equal to LanceDB's to float32 rounding).

The copy records the table's file listing (:func:`wrenmem.storage.lance.disk_listing`) from before
it read the table; it is used only while the listing is still exactly that, so any later
write, compaction or damage makes it stale, and a stale, damaged or foreign copy is simply
not used (the search then opens LanceDB and writes a new copy). A writer saves the copy of a
local table of at most ``MAX_ROWS`` rows itself; of a bigger one (up to ``FILE_MAX_ROWS``) a
detached job it starts does (:mod:`wrenmem.index.copyjob`), and a long-lived reader. One
saver at a time (:func:`copy_lock`).
"""

from __future__ import annotations

import logging
import marshal
import math
import mmap
import os
import re
import secrets
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, overload

from wrenmem.fs import statedir
from wrenmem.fs.fsutil import read_marshal, write_marshal
from wrenmem.index import table as index
from wrenmem.index import tablevectors, vectorscan
from wrenmem.settings import Settings
from wrenmem.sql import labels as sqllabels
from wrenmem.storage import lance

log = logging.getLogger(__name__)

FILE_NAME = statedir.RECALL_COPY
VERSION = 5  # 2: the vectors and rows in a mapped file beside it; 3: the float32 vectors
#              found in the table's own data files (tablevectors) where they can be; 4: a
#              row's path not saved where it is its id, its other short columns once a copy;
#              5: the rows' SQL labels (sqllabels), under the fingerprint of what made them
MAX_ROWS = 20_000  # a writer saves the copy of a table up to this size (45 MB at 512 dims)
FILE_MAX_ROWS = 200_000  # a long-lived reader saves the copy it holds up to this size
DATA_NAME = re.compile(r"recall-copy\.[0-9a-f]{16}\.data")
LEFT_NAME = re.compile(r"recall-copy\.[0-9a-f]{16}\.data(\.tmp)?")  # to clean up
KEEP_OTHER_SECONDS = 5.0  # another writer's data file this recent may be in use
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
UPDATE_MAX_ROWS = 2_000  # a held copy follows a write that changed at most this many rows
SAVE_BATCH_ROWS = 8_192  # the copy job reads the table in batches of this many rows
LOCK_NAME = statedir.RECALL_COPY_LOCK  # held by whoever saves the copy (copy_lock)
LATER_WAIT_SECONDS = 60.0  # a long-lived reader's saving thread waits this long for it


def copy_path(settings: Settings) -> Path:
    return settings.state_dir / FILE_NAME


def _data_files(settings: Settings) -> list[Path]:
    try:
        return [p for p in settings.state_dir.iterdir() if LEFT_NAME.fullmatch(p.name)]
    except OSError:
        return []


def discard(settings: Settings) -> None:
    copy_path(settings).unlink(missing_ok=True)
    for path in _data_files(settings):
        path.unlink(missing_ok=True)


def save(settings: Settings, table: Any) -> bool:
    """After a write, under the index lock: save the copy of ``table`` (this project's
    local pairs table), or remove an old copy when there is none to save (a remote index,
    more than ``MAX_ROWS`` rows: reading a big table whole would make every small write
    slow; up to ``FILE_MAX_ROWS`` a detached job is started to save it,
    :func:`wrenmem.index.copyjob.start`, and a long-lived reader saves its copy too)."""
    try:
        rows = table.count_rows()
        if settings.remote_index or not 0 < rows <= MAX_ROWS:
            discard(settings)  # (of an earlier version: it no longer fits the table)
            if not settings.remote_index and MAX_ROWS < rows <= FILE_MAX_ROWS:
                from wrenmem.index import copyjob

                copyjob.start(settings)  # saved by a detached process, this one goes on
            return False
        listing = index.disk_listing(settings)
        copy = RecallCopy.from_table(table)
        remember(settings, copy, listing)  # a warm backend of this process needs no read
        return write(settings, copy, listing)
    except Exception as e:  # the copy is an optimisation: recall works without it
        log.debug("recall copy not written: %s", e)
        discard(settings)
        return False


def write(settings: Settings, copy: RecallCopy, listing: lance.Listing | None,
          wait: float = 0.0, *, again: bool = True) -> bool:
    """Save ``copy``, keyed by ``listing``: the table's files as they were before the
    table it was read from was opened (or, under the index lock, after the last write).

    Two files: ``recall-copy.bin`` (what is small: the listing, the BM25 postings, where
    each part of the other file is) and ``recall-copy.<token>.data`` (the vectors as
    float32 and int8, the rows one by one), which a reader maps into memory and reads
    only in part: the int8 vectors whole, the rows and float32 vectors it shows.

    Under :func:`copy_lock`, waited for ``wait`` seconds (not got: another process is
    saving a copy, and this one is not written). ``again=False``: not when the saved copy
    is already one of ``listing``."""
    if (settings.remote_index or not listing or not 0 < len(copy.rows) <= FILE_MAX_ROWS):
        return False
    with copy_lock(settings, wait) as held:
        return held and write_held(settings, copy, listing, again=again)


def write_held(settings: Settings, copy: RecallCopy, listing: lance.Listing,
               step: Callable[[str], None] | None = None, *, again: bool = True) -> bool:
    """:func:`write`, by a caller holding :func:`copy_lock`. ``again=False``: nothing is
    written when the saved copy is already one of ``listing`` (a background job's)."""
    if not again and saved_listing(settings) == listing:
        return True
    with _WRITING:  # one at a time (a long-lived reader writes from a thread)
        return _write(settings, copy, listing, step)


def saved_listing(settings: Settings) -> lance.Listing | None:
    """The table's files the saved copy was made from (None: no readable copy)."""
    data = read_marshal(copy_path(settings))
    if (not isinstance(data, dict) or data.get("v") != VERSION
            or data.get("root") != str(settings.root) or data.get("uri") != settings.index_uri
            or not isinstance(data.get("data"), str) or not DATA_NAME.fullmatch(data["data"])):
        return None
    try:  # its data file there, whole
        if (settings.state_dir / data["data"]).stat().st_size != data.get("size"):
            return None
    except OSError:
        return None
    listing = data.get("listing")
    return listing if isinstance(listing, dict) else None


@contextmanager
def copy_lock(settings: Settings, timeout: float = 0.0) -> Iterator[bool]:
    """Hold ``.wrenmem/recall-copy.lock`` (an exclusive ``flock``: the kernel drops it when
    its holder dies) for the block: one process at a time saves the copy, so none writes
    its copy over a newer one's. Yields False when it was not got within ``timeout``
    seconds (another saver has it: that one's copy will do) or cannot be opened."""
    from wrenmem.storage.lock import poll_flock

    try:
        fd = os.open(settings.state_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError as e:
        log.debug("recall copy lock not opened: %s", e)
        yield False
        return
    try:
        try:
            got = poll_flock(fd, time.monotonic() + timeout)
        except OSError as e:  # not a lock this file system keeps: no saver takes it
            log.debug("recall copy lock not taken: %s", e)
            got = False
        yield got
    finally:
        os.close(fd)  # (drops the flock)


_WRITING = threading.Lock()
_PENDING: dict[str, tuple[Settings, RecallCopy, lance.Listing]] = {}  # by project
_PENDING_LOCK = threading.Lock()
_WRITER: list[threading.Thread] = []  # the thread of write_later, while it runs


def write_later(settings: Settings, copy: RecallCopy, listing: lance.Listing) -> None:
    """:func:`write` in a background thread, for a long-lived reader: only the latest copy
    asked for meanwhile is written (a run of writes saves one file, not one per version)."""
    with _PENDING_LOCK:
        start = not _PENDING
        _PENDING[str(settings.root)] = (settings, copy, listing)
        if start:
            writer = threading.Thread(target=_write_pending, daemon=True,
                                      name="wrenmem-recall-copy")
            _WRITER[:] = [writer]
            writer.start()


def written(timeout: float | None = None) -> bool:
    """Wait until the copies :func:`write_later` was asked for are written (a warm-up's
    last step: the writing thread holds the GIL for seconds at 100,000 rows, which the
    requests meanwhile wait for); False if still writing after ``timeout`` seconds."""
    for writer in list(_WRITER):
        writer.join(timeout)
    return not any(writer.is_alive() for writer in _WRITER)


def _write_pending() -> None:
    while True:
        with _PENDING_LOCK:
            if not _PENDING:
                return
            _root, job = _PENDING.popitem()
        write(*job, wait=LATER_WAIT_SECONDS, again=False)  # (a job may have saved it)


def _vector_runs(settings: Settings, copy: RecallCopy, listing: lance.Listing
                 ) -> list[tablevectors.Run] | None:
    """Where the table's data files hold the copy's float32 rows (None: not found there,
    or a table below ``vectorscan.MIN_ROWS`` rows, whose every search scans every float32
    row: those stay in the copy, mapped as they are, not made row by row each time)."""
    if isinstance(copy.matrix, tablevectors.MappedRows):
        return copy.matrix.runs  # (a copy read from a file: the same table's files)
    if len(copy.rows) < vectorscan.MIN_ROWS:
        return None
    folder = lance.table_folder(settings.index_uri, index.TABLE)
    return None if folder is None else tablevectors.locate(folder, listing, copy.matrix)


def _distinct_terms(terms: str | None) -> str | None:
    """A row's full-text terms, each once, in order: what a search reads of them (the set
    of a candidate's terms); their counts are in the postings. The terms repeat the
    question's words (its weight), so this is a third of their size, 18 MB at 100,000."""
    return terms if not terms else " ".join(dict.fromkeys(terms.split()))


# A saved row: (id, path or None where it is the id, question, sql, group, distinct terms),
# where group numbers the row's (datasource, dialect, tags, source, meta) in the copy's list
# of them: a few hundred distinct at 100,000 rows, 7 MB saved once each
_GROUPED = slice(POSITION["datasource"], POSITION["meta"] + 1)
_STORED_LENGTH = 6


def _stored_row(row: tuple[Any, ...], groups: list[tuple[Any, ...]],
                known: dict[bytes, int]) -> tuple[Any, ...]:
    group = row[_GROUPED]
    key = marshal.dumps(group)
    at = known.get(key)
    if at is None:
        at = known[key] = len(groups)
        groups.append(group)
    row_id, path = row[POSITION["id"]], row[POSITION["path"]]
    return (row_id, None if path == row_id else path, row[POSITION["question"]],
            row[POSITION["sql"]], at, _distinct_terms(row[POSITION["terms"]]))


def _write(settings: Settings, copy: RecallCopy, listing: lance.Listing,
           step: Callable[[str], None] | None = None) -> bool:
    """(``step``, for the tests of a kill: called by name at the moments between writes.)"""
    import numpy as np

    try:
        if isinstance(copy.rows, LazyRows):  # in their saved form already: as they are
            held = copy.rows
            offsets = np.asarray(held.offsets, dtype=np.int64)
            blob = bytes(held.data[held.start:held.start + int(offsets[-1])])
            groups = held.groups
        else:
            groups = []
            known: dict[bytes, int] = {}
            encoded = [marshal.dumps(_stored_row(r, groups, known)) for r in copy.rows]
            offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
            offsets[1:] = np.cumsum([len(b) for b in encoded])
            blob = b"".join(encoded)
            del encoded
        # every row's SQL labels, uint8 (43 bytes a row): what the form reader counts
        parts: list[tuple[str, Any]] = [
            ("offsets", offsets),
            ("labels", np.ascontiguousarray(copy.label_matrix(), dtype=np.uint8))]
        runs = _vector_runs(settings, copy, listing)
        if runs is None:  # not found in the table's files: the copy holds them itself
            parts.insert(0, ("matrix", np.ascontiguousarray(copy.matrix, dtype=np.float32)))
        else:  # but for the few that are not (a small fragment's)
            own = tablevectors.own_rows(runs)
            if own:
                parts.insert(0, ("own", np.ascontiguousarray(
                    copy.matrix[np.array(own, dtype=np.int64)], dtype=np.float32)))
        # the prefix codes (a third of the int8 copy's size), else the int8 copy: what a
        # reader scans before it re-scores a few rows in float32 (none for a small table)
        prefix = copy.scan().make_prefix(wait=True)
        codes = None
        if prefix is not None:
            parts += [("p_scale", prefix.scale), ("p_terms", prefix.terms),
                      ("p_rotation", prefix.rotation), ("p_ints", prefix.ints)]
            codes = {"dims": int(prefix.ints.shape[1]), "skew": float(prefix.skew)}
        else:
            quantized = copy.scan().int8()
            if quantized is not None:
                parts += list(zip(("ints", "scale", "error"), quantized, strict=True))
        sections: dict[str, tuple[int, int]] = {}
        at = 0
        for name, part in parts:
            sections[name] = (at, part.nbytes)
            at += part.nbytes
        sections["rows"] = (at, len(blob))
        name = f"recall-copy.{secrets.token_hex(8)}.data"
        path = settings.state_dir / name
        tmp = path.with_name(name + ".tmp")
        with open(tmp, "wb") as out:
            for _name, part in parts:
                out.write(memoryview(part).cast("B"))
                if step is not None:
                    out.flush()
                    step("data-half")
            out.write(blob)
        os.replace(tmp, path)
        if step is not None:
            step("data")
        record = {
            "v": VERSION, "root": str(settings.root), "uri": settings.index_uri,
            "model_id": copy.model_id, "listing": listing, "columns": list(COLUMNS),
            "count": len(copy.rows), "dim": int(copy.matrix.shape[1]),
            "lengths": copy.lengths.tobytes(),
            "postings": {t: _packed(raw) for t, raw in copy.postings.items()},
            "live": None if copy.live is None else copy.live.tobytes(),
            "data": name, "size": at + len(blob), "sections": sections, "runs": runs,
            "prefix": codes, "groups": groups, "labels": sqllabels.fingerprint(),
        }
        if not write_marshal(copy_path(settings), record):
            path.unlink(missing_ok=True)
            return False
    except (OSError, ValueError) as e:
        log.debug("recall copy not written: %s", e)
        return False
    now = time.time()
    for old in _data_files(settings):  # a writer's file of moments ago may be in use yet
        try:
            if old.name != name and now - old.stat().st_mtime > KEEP_OTHER_SECONDS:
                old.unlink()
        except OSError:
            pass
    return True


class DamagedCopy(ValueError):
    """A saved copy's row that cannot be read: the search forgets the copy and asks
    LanceDB (the file's size and layout are checked when it is opened; reading every row
    then would cost a one-shot recall more than its search)."""


class _Rows(Sequence[tuple[Any, ...]]):
    """A sequence of rows read one by one (:meth:`_at`, from 0 to ``len - 1``): the index
    handling of a list's (a slice, a negative index, IndexError past either end) made
    once for :class:`LazyRows` and :class:`ChainedRows`."""

    def _at(self, n: int) -> tuple[Any, ...]:
        raise NotImplementedError

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


class LazyRows(_Rows):
    """The rows of a saved copy, each decoded when first asked for (a one-shot recall
    shows a few of 100,000)."""

    def __init__(self, data: Any, start: int, offsets: Any, groups: list[tuple[Any, ...]]):
        self.data = data  # the mapped file
        self.start = start
        self.offsets = offsets
        self.groups = groups  # each row's (datasource, dialect, tags, source, meta), by number
        self._decoded: dict[int, tuple[Any, ...]] = {}

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def _decode(self, n: int) -> tuple[Any, ...]:
        a, b = int(self.offsets[n]), int(self.offsets[n + 1])
        try:
            row = marshal.loads(self.data[self.start + a:self.start + b])
        except (EOFError, ValueError, TypeError) as e:
            raise DamagedCopy(f"row {n} of the recall copy cannot be read: {e}") from e
        if not isinstance(row, tuple) or len(row) != _STORED_LENGTH:
            raise DamagedCopy(f"row {n} of the recall copy is not a row")
        row_id, path, question, sql, at, terms = row
        try:
            datasource, dialect, tags, source, meta = self.groups[at]
        except (IndexError, TypeError, ValueError) as e:
            raise DamagedCopy(f"row {n} of the recall copy has no group {at!r}") from e
        return (row_id, row_id if path is None else path, question, sql, datasource, dialect,
                list(tags) if isinstance(tags, list) else tags, source, meta, terms)

    def _at(self, n: int) -> tuple[Any, ...]:
        row = self._decoded.get(n)
        if row is None:
            row = self._decoded[n] = self._decode(n)
        return row

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        for n in range(len(self)):
            row = self._decoded.get(n)
            yield row if row is not None else self._decode(n)


class ChainedRows(_Rows):
    """The rows of a copy followed by rows added to it, without reading the first ones
    (a saved copy's rows are decoded when asked for)."""

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


class StackedRows:
    """Two blocks of float32 rows seen as one matrix, the first not copied (a saved copy's
    mapped 200 MB at 100,000 rows, of which a search reads a few rows): a row, a list of
    rows or a slice is read from the blocks; anything else (a whole scan) from the two
    joined into one array, made once."""

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


# A term's postings: its (row, count) pairs as int32s one after the other (as made), or, as
# saved, (the rows as int32s, the counts as uint8s or, past 255, uint16s): 5/8 of the size
Posting = bytes | tuple[bytes, bytes]


def _packed(raw: Posting) -> Posting:
    """``raw`` as saved: rows and counts apart, the counts as narrow as they fit."""
    import numpy as np

    if isinstance(raw, tuple):
        return raw
    pairs = np.frombuffer(raw, dtype=np.int32).reshape(-1, 2)
    top = int(pairs[:, 1].max()) if len(pairs) else 0
    if top > 0xFFFF:
        return raw
    counts = pairs[:, 1].astype(np.uint8 if top <= 0xFF else np.uint16)
    return (np.ascontiguousarray(pairs[:, 0]).tobytes(), counts.tobytes())


def _unpacked(raw: Posting) -> tuple[Any, Any]:
    """(rows, counts) of a term's postings, as arrays (read-only views where they can be)."""
    import numpy as np

    if isinstance(raw, tuple):
        rows = np.frombuffer(raw[0], dtype=np.int32)
        width = len(raw[1]) // len(rows) if len(rows) else 1
        if width not in (1, 2) or width * len(rows) != len(raw[1]):
            raise DamagedCopy("a term's postings in the recall copy are not of their size")
        return rows, np.frombuffer(raw[1], dtype=np.uint8 if width == 1 else np.uint16)
    pairs = np.frombuffer(raw, dtype=np.int32).reshape(-1, 2)
    return pairs[:, 0], pairs[:, 1]


def _plain(raw: Posting) -> bytes:
    """A term's postings as made (pairs of int32s), to add more to."""
    import numpy as np

    if not isinstance(raw, tuple):
        return raw
    rows, counts = _unpacked(raw)
    return np.column_stack([rows, counts.astype(np.int32)]).astype(np.int32).tobytes()


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


class RecallCopy:
    """One saved version of the pairs table (see the module docstring)."""

    def __init__(self, model_id: str, rows: Sequence[tuple[Any, ...]], matrix: Any,
                 lengths: array, postings: Mapping[str, Posting],
                 listing: lance.Listing | None = None, hashes: list[str] | None = None,
                 live: Any = None, labels: Any = None):
        import numpy as np

        self.model_id = model_id
        self.listing = listing  # the table's files it was read from, when saved
        self.rows = rows  # tuples of the COLUMNS
        self.matrix = matrix  # unit rows, float32
        self.lengths = lengths
        self.postings = postings
        # each row's content hash, when read from the table (what :meth:`updated` needs)
        self.hashes = hashes
        # which rows the table still holds (None: all): an update leaves the rows a
        # write removed in place, out of every search and statistic, until it reads anew
        self.live = live
        # the SQL labels of the first rows (sqllabels.label_matrix), when known: saved, or
        # of the copy this one was made from; label_matrix() makes the rest
        self.labels = labels
        self._labels_checked = False
        self._length_array: Any = np.frombuffer(lengths, dtype=np.int32)
        self.live_count = len(rows) if live is None else int(np.count_nonzero(live))
        kept = self._length_array if live is None else self._length_array[live]
        self.average_length = float(kept.sum()) / self.live_count if self.live_count else 0.0
        self._scan: vectorscan.VectorScan | None = None
        self._allowed: dict[Any, Any] = {}
        self._term_scores: dict[str, tuple[Any, Any] | None] = {}
        self._term_postings = 0  # held in _term_scores

    @classmethod
    def from_table(cls, table: Any) -> RecallCopy:
        """The copy of the table's current version (read whole: for small tables)."""
        # only these columns: not the embedded text, read and dropped at once otherwise
        import pyarrow as pa

        data = (table.search().select([*COLUMNS, "content_hash", "vector"]).limit(None)
                .to_arrow())
        # the vectors first, their Arrow column let go before the rows become Python
        # objects (a peak of 1.29 GB at 100,000 rows otherwise, 200 MB a copy of them)
        matrix = lance.unit_vectors(data)
        data = data.drop_columns(["vector"])
        pa.default_memory_pool().release_unused()
        values = [data.column(c).to_pylist() for c in COLUMNS]
        hashes = [h or "" for h in data.column("content_hash").to_pylist()]
        del data
        lengths, postings = _postings(values[COLUMNS.index("terms")])
        copy = cls(index.table_model_id(table) or "",
                   [tuple(r) for r in zip(*values, strict=True)], matrix, lengths, postings,
                   hashes=hashes)
        del values
        pa.default_memory_pool().release_unused()  # 200 MB at 100,000 rows, else kept
        return copy

    @classmethod
    def for_saving(cls, table: Any, batch_rows: int = SAVE_BATCH_ROWS) -> RecallCopy:
        """The copy of the table's current version as :func:`write` saves it (the copy
        job's): read in batches of ``batch_rows``, each row kept only in its saved form
        (:class:`LazyRows` over the bytes to write), so no row is a Python object for
        longer than its batch: the same rows, vectors, postings and labels as :meth:`from_table`
        in about half its memory at 100,000 rows. Raises ValueError when the table
        changed while it was read (more rows than it counted)."""
        import numpy as np
        import pyarrow as pa

        count = table.count_rows()
        reader = (table.search().select([*COLUMNS, "vector"]).limit(None)
                  .to_batches(batch_rows))
        matrix: Any = None
        groups: list[tuple[Any, ...]] = []
        known: dict[bytes, int] = {}
        pieces: list[bytes] = []
        lengths = array("i")
        lists: dict[str, list[bytes]] = {}
        labels: list[Any] = []  # each batch's, made from its SQL while it is a list of strings
        at = 0
        for batch in reader:
            data = pa.Table.from_batches([batch])
            size = data.num_rows
            if not size:
                continue
            if at + size > count:
                raise ValueError("the table changed while it was read")
            vectors = lance.unit_vectors(data)
            if matrix is None:
                matrix = np.empty((count, vectors.shape[1]), dtype=np.float32)
            matrix[at:at + size] = vectors
            values = [data.column(c).to_pylist() for c in COLUMNS]
            del data, vectors
            more, postings = _postings(values[POSITION["terms"]], at)
            lengths.extend(more)
            for term, raw in postings.items():
                lists.setdefault(term, []).append(raw)
            labels.append(sqllabels.label_matrix(s or "" for s in values[POSITION["sql"]]))
            pieces += [marshal.dumps(_stored_row(r, groups, known))
                       for r in zip(*values, strict=True)]
            at += size
        if matrix is None or at != count:
            raise ValueError("the table changed while it was read")
        offsets = np.zeros(count + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(b) for b in pieces])
        blob = b"".join(pieces)
        del pieces
        pa.default_memory_pool().release_unused()
        return cls(index.table_model_id(table) or "", LazyRows(blob, 0, offsets, groups),
                   matrix, lengths, {t: b"".join(raws) for t, raws in lists.items()},
                   labels=np.concatenate(labels))

    def updated(self, table: Any) -> RecallCopy | None:
        """The copy of ``table``'s current version made from this one (of an earlier
        version of the same table) by reading only the rows that are new since: the rows
        of every (id, content hash) are compared, the new ones read, and the ones gone
        left in place as not live. None when this copy cannot say (read from a file) or
        when reading whole is the better deal (many rows changed, many left behind)."""
        import numpy as np

        if self.hashes is None or index.table_model_id(table) != self.model_id:
            return None
        data = table.search().select(["id", "content_hash"]).limit(None).to_arrow()
        wanted = Counter(zip(data.column("id").to_pylist(),
                             [h or "" for h in data.column("content_hash").to_pylist()],
                             strict=True))
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
        """This copy with only the ``live`` rows of it kept (a boolean array) and ``rows``
        (with their content ``hashes`` and unit float32 ``vectors``) added at the end: its
        postings, lengths and scan are extended, none of its rows read again."""
        import numpy as np

        first = len(self.rows)
        lengths = array("i", self.lengths)
        postings: dict[str, Posting] = dict(self.postings)
        new_lengths, new_postings = _postings([r[POSITION["terms"]] for r in rows], first)
        lengths.extend(new_lengths)
        for term, raw in new_postings.items():
            postings[term] = _plain(postings.get(term, b"")) + raw
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

    def bm25(self, terms: Sequence[str], allowed: Any = None) -> dict[int, float]:
        """Row -> BM25 score of the rows holding any of ``terms`` (distinct), among the
        ``allowed`` rows (a boolean array; None: all), with every row's statistics."""
        rows, scores = self.bm25_arrays(terms, allowed)
        return dict(zip(rows.tolist(), scores.tolist(), strict=True))

    def bm25_arrays(self, terms: Sequence[str], allowed: Any = None) -> tuple[Any, Any]:
        """:meth:`bm25` as two arrays, (rows in order, their scores), computed with numpy:
        each term's contribution with the same float64 operations in the same order as
        LanceDB's formula written out, so the scores are the same bit for bit whatever
        the table's size."""
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
        None: what a search adds up, the same float64 operations per row whichever rows
        a filter keeps (each value depends on its row and the copy's statistics alone), so
        a long-lived process computes them once per copy and term (up to
        ``KEPT_POSTINGS``), not on every question."""
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
        included), made once per copy: the rows whose labels it holds (:attr:`labels`:
        saved, or of the copy it was made from) are not lexed again, only those past them.
        Saved labels that are not 0 or 1 (a damaged file) are made again."""
        import numpy as np

        checked = self._labels_checked  # (before the labels: another thread may check)
        held = self.labels
        if held is not None and not checked:
            if len(held) and int(held.max()) > 1:
                held = None
            self.labels = held
            self._labels_checked = True
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


# The last copy this process read or built, per project, index and model: a long-lived
# process (an agent's Memory, the MCP server) reads the file once, not once per question.
_RECENT: dict[tuple[str, str, str], RecallCopy] = {}


def _key(settings: Settings, model_id: str) -> tuple[str, str, str]:
    return (str(settings.root), settings.index_uri, model_id)


def remember(settings: Settings, copy: RecallCopy, listing: lance.Listing | None) -> None:
    """Keep ``copy`` (of the table whose files were ``listing`` before it was read) for
    :func:`recent`; a remote index's copies are not kept (they have no listing)."""
    if listing:
        copy.listing = listing
        _RECENT[_key(settings, copy.model_id)] = copy


def forget(settings: Settings, model_id: str) -> None:
    """Stop handing out this process's copy of the table (it turned out damaged)."""
    _RECENT.pop(_key(settings, model_id), None)


def recent(settings: Settings, model_id: str, listing: lance.Listing | None
           ) -> RecallCopy | None:
    """The copy this process last read or built of this table, if ``listing`` (the table's
    files now) is still the one it was made from."""
    copy = _RECENT.get(_key(settings, model_id))
    if copy is None or not listing or copy.listing != listing:
        return None
    return copy


def load(settings: Settings, model_id: str, listing: lance.Listing | None = None
         ) -> RecallCopy | None:
    """The copy of ``model_id``'s table of this project while the table's files are still
    exactly those it was made from (``listing``, the table's files now; default: listed
    here): the one this process already holds, else the saved file's; else None."""
    if settings.remote_index:
        return None
    if listing is None:
        listing = index.disk_listing(settings)
    held = recent(settings, model_id, listing)
    if held is not None:
        return held
    copy = _read(settings, model_id, listing)
    if copy is not None:
        remember(settings, copy, listing)
    return copy


def _read(settings: Settings, model_id: str, listing: lance.Listing | None
          ) -> RecallCopy | None:
    import numpy as np

    if not listing:
        return None
    data = read_marshal(copy_path(settings))
    try:
        if (not isinstance(data, dict) or data.get("v") != VERSION
                or data["root"] != str(settings.root) or data["uri"] != settings.index_uri
                or data["model_id"] != model_id or tuple(data["columns"]) != COLUMNS
                or data["listing"] != listing or not DATA_NAME.fullmatch(data["data"])):
            return None
        count, dim, sections = int(data["count"]), int(data["dim"]), data["sections"]
        with open(settings.state_dir / data["data"], "rb") as f:
            mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if len(mapped) != data["size"] or dim <= 0 or count <= 0:
            return None

        def part(name: str, dtype: Any, size: int) -> Any:
            at, nbytes = sections[name]
            if nbytes != size * np.dtype(dtype).itemsize or at + nbytes > len(mapped):
                raise ValueError(f"the recall copy's {name} is not of its size")
            return np.frombuffer(mapped, dtype=dtype, count=size, offset=at)

        runs, folder = data["runs"], lance.table_folder(settings.index_uri, index.TABLE)
        if runs is None:
            matrix = part("matrix", np.float32, count * dim).reshape(count, dim)
        else:
            if folder is None:
                return None
            own = None
            if "own" in sections:
                rows_own = sections["own"][1] // (4 * dim)
                own = part("own", np.float32, rows_own * dim).reshape(rows_own, dim)
            matrix = tablevectors.mapped(folder, listing, runs, count, dim, own)
            if matrix is None:
                return None
        offsets = part("offsets", np.int64, count + 1)
        start, nbytes = sections["rows"]
        if (offsets[0] != 0 or offsets[-1] != nbytes or start + nbytes != len(mapped)
                or bool((np.diff(offsets) <= 0).any())):
            return None
        quantized = None
        if "ints" in sections:
            quantized = (part("ints", np.int8, count * dim).reshape(count, dim),
                         part("scale", np.float32, count), part("error", np.float32, count))
        prefix = None
        codes = data["prefix"]
        if codes is not None:
            dims = int(codes["dims"])
            if not 0 < dims < dim:
                return None
            prefix = vectorscan.PrefixCodes(
                part("p_rotation", np.float32, dim * dims).reshape(dim, dims),
                float(codes["skew"]), part("p_ints", np.int8, count * dims).reshape(count, dims),
                part("p_scale", np.float64, count),
                part("p_terms", np.float64, count * 4).reshape(count, 4))
        labels = None  # made again by code whose labels are not those they were saved by
        if data["labels"] == sqllabels.fingerprint():
            width = len(sqllabels.LABELS)
            labels = part("labels", np.uint8, count * width).reshape(count, width)
        lengths = array("i")
        lengths.frombytes(data["lengths"])
        live = None
        if data["live"] is not None:
            live = np.frombuffer(data["live"], dtype=bool)
            if len(live) != count:
                return None
        if len(lengths) != count or not isinstance(data["postings"], dict):
            return None
        groups = data["groups"]
        if not isinstance(groups, list) or not all(
                isinstance(g, tuple) and len(g) == _GROUPED.stop - _GROUPED.start
                for g in groups):
            return None
        copy = RecallCopy(model_id, LazyRows(mapped, start, offsets, groups), matrix, lengths,
                          data["postings"], listing, live=live, labels=labels)
        copy._scan = vectorscan.VectorScan(matrix, quantized, prefix)
        return copy
    except (KeyError, TypeError, ValueError, OSError):
        return None
