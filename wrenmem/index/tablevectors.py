"""A recall copy's float32 vectors read where LanceDB already keeps them: its data files.

A table's ``vector`` column is stored in its ``data/*.lance`` files as the raw float32
values, row after row, in runs as long as a page. Holding those values a second time in the
recall copy would cost 2 KB a row at 512 dimensions (205 MB at 100,000 pairs). So the
writer of a copy finds each row in the data files instead (:func:`locate`): where its
bytes are, as runs of consecutive rows, each run checked row by row (the unit rows made
from the bytes found there must equal the copy's rows bit for bit, or the run ends there).
A reader maps those files and makes the unit rows of just the rows a search re-scores
(:class:`MappedRows`), with the same float32 operations as the copy's own rows were made
(:func:`wrenmem.storage.lance.unit_rows`), so they are the same rows bit for bit.

LanceDB never rewrites a data file in place, and the copy is used only while the table's
file listing is still the one it was made from (sizes and times included), so the runs
stay true as long as the copy is used. A row that is not found (a future file format that
encodes the column otherwise, a table too small to hold the values whole) means no runs:
the copy then holds its float32 vectors itself, as before.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Mapping, Sequence
from typing import Any

from wrenmem.storage import lance

Run = tuple[str, int, int, int]  # (file, relative to the table's folder; byte offset;
#                                   first row; rows)
OWN = ""  # a run's file when its rows are the copy's own (not found in the table's files)
OWN_MAX_SHARE = 100  # more than 1 row in this many not found: the copy holds them all
CHECK_ROWS = 4_096  # rows checked at a time while a run is followed
FIND_TRIES = 8  # rows tried for the start of the next run before giving up
ALIGN = 64  # LanceDB writes each buffer at an offset of a multiple of 64 bytes


def _map(path: str) -> mmap.mmap | None:
    try:
        with open(path, "rb") as f:
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # gone, or empty
        return None


def locate(folder: str, listing: Mapping[str, tuple[int, int]], matrix: Any
           ) -> list[Run] | None:
    """The runs of the table's data files that hold every row of ``matrix`` (unit rows,
    float32), in row order. A row not found in them (the few rows of a small fragment a
    write added may be encoded otherwise) is in a run of file :data:`OWN`: the copy holds
    it itself, at that byte offset of its block of such rows (:func:`own_rows`); None when
    more than one row in ``OWN_MAX_SHARE`` (and more than 64) is not found."""
    import numpy as np

    width = int(matrix.shape[1]) * 4
    names = sorted(n for n in listing if n.startswith("data" + os.sep) and n.endswith(".lance"))
    maps: dict[str, mmap.mmap] = {}
    for name in names:
        mapped = _map(os.path.join(folder, name))
        if mapped is not None and len(mapped) == listing[name][0]:
            maps[name] = mapped
    with np.errstate(all="ignore"):  # bytes that are not a row may read as any floats
        return _locate(maps, matrix, width)


def _locate(maps: dict[str, mmap.mmap], matrix: Any, width: int) -> list[Run] | None:
    import numpy as np

    count, dim = matrix.shape
    bits = np.ascontiguousarray(matrix, dtype=np.float32).view(np.uint32)
    words = _words(maps)
    runs: list[Run] = []
    own, own_max = 0, max(64, count // OWN_MAX_SHARE)
    row, at, found = 0, None, False  # at: (file, offset) where row ``row`` is expected
    try:
        while row < count:
            if at is None:
                # the next run is most likely further on in the file of the last (a page of
                # it), else in a file holding none yet
                used = {r[0] for r in runs if r[0] != OWN}
                hint = ([(runs[-1][0], runs[-1][1] + runs[-1][3] * width)]
                        if runs and runs[-1][0] != OWN else [])
                order = hint + [(n, 0) for n in maps if n not in used] + [
                    (n, 0) for n in maps if n in used]
                at = _find_aligned(words, maps, order, matrix, row, width)
                if at is None:  # (not at an aligned offset: searched for byte by byte)
                    at = _find(maps, order, matrix, row, width)
                found = True
                if at is None:  # the copy holds this row itself
                    own += 1
                    if own > own_max:
                        return None
                    last = runs[-1] if runs else None
                    if last is not None and last[0] == OWN and last[2] + last[3] == row:
                        runs[-1] = (OWN, last[1], last[2], last[3] + 1)
                    else:
                        runs.append((OWN, (own - 1) * width, row, 1))
                    row, found = row + 1, False
                    continue
            name, offset = at
            mapped = maps[name]
            take = min(count - row, CHECK_ROWS, (len(mapped) - offset) // width)
            same = 0
            if take > 0:  # (copied first, as a reader does: rows made from aligned memory)
                raw = np.frombuffer(mapped, dtype=np.float32, count=take * dim, offset=offset)
                made = lance.unit_rows(raw.reshape(take, dim).copy()).view(np.uint32)
                equal = (made == bits[row:row + take]).all(axis=1)
                same = take if bool(equal.all()) else int(np.argmin(equal))
                del raw, made
            if same == 0:
                if found:  # (cannot be: a row is found only where it matches)
                    return None
                at = None  # the run ended: the next row starts another
                continue
            last = runs[-1] if runs else None
            if (last is not None and last[0] == name and last[1] + last[3] * width == offset
                    and last[2] + last[3] == row):
                runs[-1] = (name, last[1], last[2], last[3] + same)
            else:
                runs.append((name, offset, row, same))
            row += same
            at, found = ((name, offset + same * width) if same == take else None), False
        return runs
    finally:
        del bits, words
        for mapped in maps.values():
            try:
                mapped.close()
            except BufferError:  # a view of it still alive: it goes with the view
                pass


def _words(maps: Mapping[str, mmap.mmap]) -> dict[str, Any]:
    """Each file's 8-byte words at offsets of a multiple of ``ALIGN`` (a view, no copy):
    LanceDB starts each page of values at such an offset, so each run's first row is at
    one of them."""
    import numpy as np

    return {name: np.frombuffer(mapped, dtype=np.uint64, count=len(mapped) // 8)[::ALIGN // 8]
            for name, mapped in maps.items()}


def _find_aligned(words: Mapping[str, Any], maps: Mapping[str, mmap.mmap],
                  order: Sequence[tuple[str, int]], matrix: Any, row: int, width: int
                  ) -> tuple[str, int] | None:
    """:func:`_find` among the aligned offsets whose first 8 bytes are those of one of the
    next few rows."""
    import numpy as np

    for ahead in range(min(FIND_TRIES, len(matrix) - row)):
        key = np.ascontiguousarray(matrix[row + ahead, :2], dtype=np.float32).view(np.uint64)
        for name, _start in order:
            for spot in np.flatnonzero(words[name] == key[0]).tolist():
                offset = spot * ALIGN - ahead * width
                if _holds(maps[name], offset, width, matrix[row]):
                    return name, offset
    return None


def _holds(mapped: mmap.mmap, offset: int, width: int, row: Any) -> bool:
    """Whether the unit row made from the values at ``offset`` is ``row``, bit for bit."""
    import numpy as np

    if offset < 0 or offset + width > len(mapped):
        return False
    raw = np.frombuffer(mapped, dtype=np.float32, count=width // 4, offset=offset)
    made = lance.unit_rows(raw[None, :].copy())[0]
    del raw
    return made.tobytes() == np.ascontiguousarray(row, dtype=np.float32).tobytes()


def _find(maps: Mapping[str, mmap.mmap], order: Sequence[tuple[str, int]], matrix: Any,
          row: int, width: int) -> tuple[str, int] | None:
    """Where row ``row``'s values are, found by the bytes of one of the next few rows (a
    row whose unit form is its stored form: most are), checked for ``row`` itself; the
    files searched in ``order`` (each from its offset there)."""
    import numpy as np

    for ahead in range(min(FIND_TRIES, len(matrix) - row)):
        wanted = np.ascontiguousarray(matrix[row + ahead], dtype=np.float32).tobytes()
        for name, start in order:
            mapped = maps[name]
            while True:
                hit = mapped.find(wanted, start)
                if hit < 0:
                    break
                offset = hit - ahead * width
                if _holds(mapped, offset, width, matrix[row]):
                    return name, offset
                start = hit + 1
    return None


def own_rows(runs: Sequence[Run]) -> list[int]:
    """The row numbers the copy holds itself (in runs of file :data:`OWN`), in order."""
    return [n for name, _offset, first, rows in runs if name == OWN
            for n in range(first, first + rows)]


class MappedRows:
    """The unit float32 rows of a recall copy, made from the runs of the table's data files
    when asked for: ``rows[n]``, ``rows[a:b]``, ``rows[numbers]`` and ``np.asarray(rows)``
    (every row: made once, then kept, for a scan of them all)."""

    def __init__(self, runs: Sequence[Run], parts: Sequence[Any], count: int, dim: int):
        import numpy as np

        self.runs = list(runs)
        self._parts = list(parts)  # per run, its values: a (rows, dim) view of a mapped file
        self._own = [r[0] == OWN for r in runs]  # (those rows are unit rows already)
        self._firsts = np.array([r[2] for r in runs], dtype=np.int64)
        self.shape = (count, dim)
        self.ndim = 2
        self.dtype = np.dtype(np.float32)
        self._whole: Any = None

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Any:
        import numpy as np

        if self._whole is not None:
            return self._whole[key]
        count = self.shape[0]
        if isinstance(key, (int, np.integer)):
            n = int(key) + (count if int(key) < 0 else 0)
            if not 0 <= n < count:
                raise IndexError(key)
            return self.take(np.array([n]))[0]
        if isinstance(key, slice):
            return self.take(np.arange(*key.indices(count)))
        numbers = np.asarray(key)
        if numbers.dtype == bool:
            numbers = np.flatnonzero(numbers)
        numbers = numbers.astype(np.int64, copy=False)
        numbers = np.where(numbers < 0, numbers + count, numbers)
        if len(numbers) and (int(numbers.min()) < 0 or int(numbers.max()) >= count):
            raise IndexError("row number out of range")
        return self.take(numbers)

    def take(self, numbers: Any) -> Any:
        """The unit rows of ``numbers`` (in range), in that order."""
        import numpy as np

        out = np.empty((len(numbers), self.shape[1]), dtype=np.float32)
        own = None
        if len(numbers):
            which = np.searchsorted(self._firsts, numbers, side="right") - 1
            for part in np.unique(which).tolist():
                chosen = which == part
                out[chosen] = self._parts[part][numbers[chosen] - self._firsts[part]]
                if self._own[part]:
                    own = chosen if own is None else own | chosen
        if own is None:
            return lance.unit_rows(out)
        made = ~own  # (each row made from its own values alone: a subset's are the whole's)
        out[made] = lance.unit_rows(out[made])
        return out

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        import numpy as np

        if self._whole is None:
            whole = np.empty(self.shape, dtype=np.float32)
            for start in range(0, self.shape[0], CHECK_ROWS):
                end = min(start + CHECK_ROWS, self.shape[0])
                whole[start:end] = self.take(np.arange(start, end))
            self._whole = whole
        return self._whole if dtype is None else self._whole.astype(dtype)


def mapped(folder: str, listing: Mapping[str, tuple[int, int]], runs: Any, count: int,
           dim: int, own: Any = None) -> MappedRows | None:
    """The rows that ``runs`` (as :func:`locate` made them) say are in the table's files,
    and in ``own`` (the copy's block of the rows not found there: a (rows, dim) float32
    array), or None when the runs do not cover ``count`` rows of ``dim`` in order, within
    files of ``listing`` of their listed sizes (and ``own``)."""
    import numpy as np

    width = dim * 4
    maps: dict[str, mmap.mmap] = {}
    parts = []
    row = 0
    try:
        for name, offset, first, rows in runs:
            if name == OWN and own is not None and first == row and rows > 0 and (
                    offset >= 0 and offset % width == 0
                    and offset // width + rows <= len(own)):
                parts.append(own[offset // width:offset // width + rows])
                row += rows
                continue
            if (not isinstance(name, str) or name not in listing or first != row or rows <= 0
                    or offset < 0):
                return None
            if name not in maps:
                found = _map(os.path.join(folder, name))
                if found is None or len(found) != listing[name][0]:
                    return None
                maps[name] = found
            if offset + rows * width > len(maps[name]):
                return None
            parts.append(np.frombuffer(maps[name], dtype=np.float32, count=rows * dim,
                                       offset=offset).reshape(rows, dim))
            row += rows
    except (TypeError, ValueError):
        return None
    if row != count:
        return None
    return MappedRows([tuple(r) for r in runs], parts, count, dim)
