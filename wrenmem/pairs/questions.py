"""Which pair files ask a question, without reading 100,000 of them.

``store`` needs the pairs that ask the question it stores (the file it updates, the
duplicates it warns about), not every pair: a scan of the catalog at 100,000 files costs
seconds. ``.wrenmem/questions.bin`` keeps, for the pair files as one stat walk found them
(:func:`wrenmem.pairs.listing.walk`), two CRC-32 codes per file: of its question's
:func:`~wrenmem.pairs.text.question_key` (what ``store`` matches) and of its
:func:`~wrenmem.pairs.text.loose_question` (what ``duplicates`` matches).

:func:`asking` walks the files again (one ``stat`` each) and reads only the files that may
ask the question: those whose recorded code is the question's, and every file that is new
or whose stat is not as recorded (or too recent for its stat to vouch for it, as
:data:`wrenmem.fsutil.RACY_SECONDS` says). Each is read and parsed afresh, and the question
compared as text, so a code shared by chance costs one read, never a wrong answer. Past
``REBUILD_AFTER`` such files, the catalog is scanned as before and the record rebuilt.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from wrenmem import statedir
from wrenmem.errors import WrenmemError
from wrenmem.fsutil import RACY_SECONDS, read_marshal, write_marshal
from wrenmem.pairs.catalog import read_paths, require_knowledge_dir, scan
from wrenmem.pairs.listing import Listing, walk
from wrenmem.pairs.pairfile import Pair
from wrenmem.pairs.swap import finish_interrupted
from wrenmem.pairs.text import loose_question, question_key
from wrenmem.settings import Settings

FILE_NAME = statedir.QUESTIONS
VERSION = 1
REBUILD_AFTER = 2000  # changed files read one by one, past which the catalog is scanned
NONE = -1  # the code of a file that holds no pair (unreadable, not a pair file)


def codes(question: str) -> tuple[int, int]:
    """The two codes of a question: of its ``question_key`` and of its loose form."""
    return (zlib.crc32(question_key(question).encode("utf-8", "surrogatepass")),
            zlib.crc32(loose_question(question).encode("utf-8", "surrogatepass")))


def asks(pair: Pair, question: str) -> bool:
    """``pair`` asks ``question`` for ``store`` (the same key) or for ``duplicates``."""
    return (question_key(pair.nl) == question_key(question)
            or loose_question(pair.nl) == loose_question(question))


def _path(settings: Settings) -> Path:
    return settings.state_dir / FILE_NAME


def asking(settings: Settings, question: str) -> list[Pair]:
    """Every pair whose question is ``question`` by :func:`question_key` or by
    :func:`loose_question`, read from its file now, in path order: what a scan of every
    file filtered by :func:`asks` returns (see the module docstring)."""
    require_knowledge_dir(settings)
    finish_interrupted(settings)  # an import killed while moving its files into place
    found = walk(settings)
    record = _load(settings)
    want = codes(question)
    if record is not None and _all_unchanged(record, found):
        # The common case: no file changed since the record. Only the files whose code is
        # the question's are read (no path is built for the others).
        ask, loose = array("q"), array("q")
        ask.frombytes(record["ask"])
        loose.frombytes(record["loose"])
        if len(ask) * 24 == len(found.keys) == len(loose) * 24:
            hits = sorted({n for n, code in enumerate(ask) if code == want[0]}
                          | {n for n, code in enumerate(loose) if code == want[1]})
            got = read_paths(settings, [found.path_at(n) for n in hits])
            return sorted((p for p in got.pairs if asks(p, question)), key=lambda p: p.path)
    paths = found.paths()
    keys = array("q")
    keys.frombytes(found.keys)
    unchanged = _unchanged(record, found, paths, keys) if record is not None else None
    if unchanged is None:
        return _rebuild(settings, found, paths, question)
    read: list[str] = []
    known: dict[str, tuple[int, int]] = {}
    for n, path in enumerate(paths):
        if keys[n * 3 + 1] < 0:
            continue  # could not be stat'ed (a size is never negative): not a pair now
        prior = unchanged.get(path)
        if prior is None:
            read.append(path)
        else:
            known[path] = prior
            if prior[0] == want[0] or prior[1] == want[1]:
                read.append(path)
    fresh = [p for p in read if p not in known]
    if len(fresh) > REBUILD_AFTER:
        return _rebuild(settings, found, paths, question)
    got = read_paths(settings, read)
    by_path = {p.path: p for p in got.pairs}
    if fresh:  # record the files read for the next call (they were read after the walk)
        for path in fresh:
            pair = by_path.get(path)
            known[path] = codes(pair.nl) if pair is not None else (NONE, NONE)
        _save(settings, found, paths, known)
    return sorted((p for p in got.pairs if asks(p, question)), key=lambda p: p.path)


def record_scan(settings: Settings, found: Listing, pairs: Mapping[str, Pair]) -> bool:
    """After every pair file was read following the walk ``found`` (a sync's snapshot:
    ``pairs`` by path), record each file's codes, so that the first ``store`` after an
    index reads no file but those asking its question. The codes of files whose stat is
    as recorded (and old enough to vouch) are kept, the others computed from ``pairs``; a
    file changed after the walk has a stat no longer as recorded, so :func:`asking` reads
    it. True when written (nothing to write when the record is this walk's already)."""
    record = _load(settings)
    if record is not None and _all_unchanged(record, found):
        return False
    paths = found.paths()
    keys = array("q")
    keys.frombytes(found.keys)
    prior = (_unchanged(record, found, paths, keys) if record is not None else None) or {}
    known: dict[str, tuple[int, int]] = {}
    for path in paths:
        got = prior.get(path)
        if got is None:
            pair = pairs.get(path)
            got = codes(pair.nl) if pair is not None else (NONE, NONE)
        known[path] = got
    _save(settings, found, paths, known)
    return True


def _all_unchanged(record: dict[str, Any], found: Listing) -> bool:
    """The walk found the very paths and stats recorded, each old enough to vouch."""
    return (record["base"] == found.base and record["id"] == found.id
            and record["keys"] == found.keys
            and found.newest_ns < (float(record["taken_at"]) - RACY_SECONDS) * 1e9)


def _unchanged(record: dict[str, Any], found: Listing, paths: list[str], keys: array
               ) -> dict[str, tuple[int, int]] | None:
    """path -> recorded codes of every file whose stat is as recorded and old enough to
    vouch for its content; None when the record is of another folder."""
    if record["base"] != found.base:
        return None
    limit = (float(record["taken_at"]) - RACY_SECONDS) * 1e9
    old_paths: list[str] = record["paths"].split("\n") if record["paths"] else []
    old_keys = array("q")
    old_keys.frombytes(record["keys"])
    ask, loose = array("q"), array("q")
    ask.frombytes(record["ask"])
    loose.frombytes(record["loose"])
    if not (len(old_keys) == 3 * len(old_paths) == 3 * len(ask) == 3 * len(loose)):
        return None
    same_order = record["id"] == found.id
    out: dict[str, tuple[int, int]] = {}
    if _all_unchanged(record, found):
        return dict(zip(paths, zip(ask, loose, strict=True), strict=True))
    index = None if same_order else {p: n for n, p in enumerate(old_paths)}
    for n, path in enumerate(paths):
        m = n if index is None else index.get(path)
        if m is None:
            continue
        key = keys[n * 3:n * 3 + 3]
        if key == old_keys[m * 3:m * 3 + 3] and key[0] < limit:
            out[path] = (ask[m], loose[m])
    return out


def _rebuild(settings: Settings, found: Listing, paths: list[str], question: str
             ) -> list[Pair]:
    """Scan the catalog (every file, through its cache), record every file's codes."""
    pairs = scan(settings).pairs
    by_path = {p.path: p for p in pairs}
    known = {}
    for path in paths:
        pair = by_path.get(path)
        known[path] = codes(pair.nl) if pair is not None else (NONE, NONE)
    _save(settings, found, paths, known)
    return [p for p in pairs if asks(p, question)]


def _load(settings: Settings) -> dict[str, Any] | None:
    try:
        data = read_marshal(_path(settings))
    except WrenmemError:
        return None
    try:
        if (isinstance(data, dict) and data.get("v") == VERSION
                and data.get("root") == str(settings.root)
                and all(isinstance(data.get(k), bytes) for k in ("keys", "ask", "loose"))
                and isinstance(data.get("paths"), str) and isinstance(data.get("id"), str)
                and isinstance(data.get("base"), str)):
            float(data["taken_at"])
            return data
    except (TypeError, ValueError):
        pass
    return None


def _save(settings: Settings, found: Listing, paths: list[str],
          known: dict[str, tuple[int, int]]) -> None:
    """The record of the walk ``found``: the codes of each of its files (a file missing
    from ``known`` gets a stat no file has, so it is read next time)."""
    keys = array("q")
    keys.frombytes(found.keys)
    ask, loose = array("q"), array("q")
    for n, path in enumerate(paths):
        got = known.get(path)
        if got is None:
            keys[n * 3:n * 3 + 3] = array("q", (-1, -1, -1))
            got = (NONE, NONE)
        ask.append(got[0])
        loose.append(got[1])
    record = {"v": VERSION, "root": str(settings.root), "base": found.base, "id": found.id,
              "taken_at": found.taken_at, "paths": "\n".join(paths), "keys": keys.tobytes(),
              "ask": ask.tobytes(), "loose": loose.tobytes()}
    try:
        write_marshal(_path(settings), record)
    except WrenmemError:
        pass
