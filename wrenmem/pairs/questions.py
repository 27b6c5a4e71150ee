"""Which pair files ask a question, without reading 100,000 of them (``store``'s lookup).

``.wrenmem/questions.bin`` keeps, for the files of one stat walk
(:func:`wrenmem.pairs.listing.walk`), two CRC-32 codes per file: of its case-folded
:func:`~wrenmem.pairs.text.question_key` and of its :func:`~wrenmem.pairs.text.loose_question`.
:func:`asking` reads only the files whose code is the question's and those new or changed
since (or too recent to trust their stat); each is parsed and compared as text, so a shared
code costs a read, never a wrong answer. Past ``REBUILD_AFTER`` such files the catalog is
scanned and the record rebuilt; a sync that reads every file writes it (:func:`record_scan`)."""

from __future__ import annotations

import os
import zlib
from array import array
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from wrenmem.errors import WrenmemError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import RACY_SECONDS, read_marshal, write_marshal
from wrenmem.pairs.catalog import read_pair_file, read_paths, require_knowledge_dir, scan
from wrenmem.pairs.listing import Listing, walk
from wrenmem.pairs.pairfile import Pair
from wrenmem.pairs.store import matching_pairs
from wrenmem.pairs.swap import finish_interrupted
from wrenmem.pairs.text import loose_question, question_key
from wrenmem.settings import Settings

FILE_NAME = statedir.QUESTIONS
VERSION = 3  # 2: the walk's folders and names (codes carried folder by folder); 3: the key
# case folded, so a question equal but for case is found without reading every file
REBUILD_AFTER = 2000  # changed files read one by one, past which the catalog is scanned
NONE = -1  # the code of a file that holds no pair (unreadable, not a pair file)


def codes(question: str) -> tuple[int, int]:
    """The two codes of a question: of its ``question_key`` case folded (equal keys have
    equal folded keys) and of its loose form."""
    return (zlib.crc32(question_key(question).casefold().encode("utf-8", "surrogatepass")),
            zlib.crc32(loose_question(question).encode("utf-8", "surrogatepass")))


def asks(pair: Pair, question: str) -> bool:
    """``pair`` asks ``question`` for ``store`` (the same key), for ``forget`` and ``show``
    (the same key but for case) or for ``duplicates`` (the same loose form)."""
    return (question_key(pair.nl).casefold() == question_key(question).casefold()
            or loose_question(pair.nl) == loose_question(question))


def _path(settings: Settings) -> Path:
    return settings.state_dir / FILE_NAME


def asking(settings: Settings, question: str) -> list[Pair]:
    """Every pair whose question is ``question`` by :func:`question_key` (but for case) or
    by :func:`loose_question`, read from its file now, in path order."""
    require_knowledge_dir(settings)
    finish_interrupted(settings)  # an import killed while moving its files into place
    found = walk(settings)
    record = _load(settings)
    want = codes(question)
    carried = _carry(record, found) if record is not None else None
    if carried is None:
        return _rebuild(settings, found, question)
    ask, loose, unknown = carried
    if len(unknown) > REBUILD_AFTER:
        return _rebuild(settings, found, question)
    hits = {n for n, code in enumerate(ask) if code == want[0]}
    hits.update(n for n, code in enumerate(loose) if code == want[1])
    hits.update(unknown)
    at = sorted(hits)
    got = read_paths(settings, [found.path_at(n) for n in at])
    if unknown:  # record the files read for the next call (they were read after the walk)
        _fill(ask, loose, unknown, found, {p.path: p for p in got.pairs})
        _save(settings, found, ask, loose)
    return sorted((p for p in got.pairs if asks(p, question)), key=lambda p: p.path)


def record_scan(settings: Settings, found: Listing, pairs: Mapping[str, Pair]) -> bool:
    """After a sync read every pair file of the walk ``found`` (``pairs`` by path),
    record each file's codes, so the first ``store`` after an index reads only the files
    asking its question. True when written (not when the record is this walk's already)."""
    record = _load(settings)
    carried = _carry(record, found) if record is not None else None
    if carried is not None and not carried[2] and record is not None and (
            _all_unchanged(record, found)):
        return False
    if carried is None:
        ask, loose = _codes_of(found, pairs)
    else:
        ask, loose, unknown = carried
        _fill(ask, loose, unknown, found, pairs)
    _save(settings, found, ask, loose)
    return True


def _fill(ask: array, loose: array, unknown: list[int], found: Listing,
          pairs: Mapping[str, Pair]) -> None:
    """The codes of the ``unknown`` names of ``found``, from ``pairs`` (NONE: no pair)."""
    for n in unknown:
        pair = pairs.get(found.path_at(n))
        ask[n], loose[n] = codes(pair.nl) if pair is not None else (NONE, NONE)


def _codes_of(found: Listing, pairs: Mapping[str, Pair]) -> tuple[array, array]:
    """The codes of every name of ``found``, from ``pairs`` (NONE: no pair there)."""
    ask, loose = array("q"), array("q")
    for path in found.paths():
        pair = pairs.get(path)
        got = codes(pair.nl) if pair is not None else (NONE, NONE)
        ask.append(got[0])
        loose.append(got[1])
    return ask, loose


def _all_unchanged(record: dict[str, Any], found: Listing) -> bool:
    """The walk found the very paths and stats recorded, each old enough to vouch."""
    return (record["base"] == found.base and record["id"] == found.id
            and record["keys"] == found.keys
            and found.newest_ns < (float(record["taken_at"]) - RACY_SECONDS) * 1e9)


def _carry(record: dict[str, Any], found: Listing) -> tuple[array, array, list[int]] | None:
    """The recorded codes of each name of ``found`` whose stat is as recorded and old
    enough to vouch (NONE for a failed stat), and the positions of the others (to be read);
    None when the record is of another folder. A folder of the same names compares as bytes."""
    if record["base"] != found.base:
        return None
    limit = (float(record["taken_at"]) - RACY_SECONDS) * 1e9
    old_keys = array("q")
    old_keys.frombytes(record["keys"])
    old_ask, old_loose = array("q"), array("q")
    old_ask.frombytes(record["ask"])
    old_loose.frombytes(record["loose"])
    old_names: tuple[tuple[str, ...], ...] = record["names"]
    if not (len(old_keys) == 3 * len(old_ask) == 3 * len(old_loose)
            == 3 * sum(len(ns) for ns in old_names)) or len(old_names) != len(record["dirs"]):
        return None
    old_at: dict[str, tuple[int, tuple[str, ...]]] = {}
    at = 0
    for folder, names in zip(record["dirs"], old_names, strict=True):
        old_at[folder] = (at, names)
        at += len(names)
    keys = array("q")
    keys.frombytes(found.keys)
    total = len(keys) // 3
    ask, loose = array("q", [NONE]) * total, array("q", [NONE]) * total
    unknown: list[int] = []
    raw, old_raw = found.keys, record["keys"]

    def one(n: int, m: int | None) -> None:
        key = keys[n * 3:n * 3 + 3]
        if key[1] < 0:
            return  # could not be stat'ed (a size is never negative): not a pair now
        if m is not None and key == old_keys[m * 3:m * 3 + 3] and key[0] < limit:
            ask[n], loose[n] = old_ask[m], old_loose[m]
        else:
            unknown.append(n)

    start = 0
    for folder, names in zip(found.dirs, found.names, strict=True):
        count = len(names)
        old = old_at.get(folder)
        if old is not None and old[1] == names:  # the same names: positions align
            o = old[0]
            if (raw[start * 24:(start + count) * 24] == old_raw[o * 24:(o + count) * 24]
                    and max(keys[start * 3:(start + count) * 3:3], default=-1) < limit):
                ask[start:start + count] = old_ask[o:o + count]
                loose[start:start + count] = old_loose[o:o + count]
            else:
                for k in range(count):
                    one(start + k, o + k)
        else:
            index = {} if old is None else {name: old[0] + k for k, name in enumerate(old[1])}
            for k, name in enumerate(names):
                one(start + k, index.get(name))
        start += count
    return ask, loose, unknown


def _rebuild(settings: Settings, found: Listing, question: str) -> list[Pair]:
    """Scan the catalog (every file, through its cache), record every file's codes."""
    pairs = scan(settings).pairs
    ask, loose = _codes_of(found, {p.path: p for p in pairs})
    _save(settings, found, ask, loose)
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
                and isinstance(data.get("dirs"), tuple) and isinstance(data.get("names"), tuple)
                and isinstance(data.get("id"), str) and isinstance(data.get("base"), str)):
            float(data["taken_at"])
            return data
    except (TypeError, ValueError):
        pass
    return None


def _save(settings: Settings, found: Listing, ask: array, loose: array) -> None:
    """The record of the walk ``found``: the codes of each of its names, in walk order."""
    record = {"v": VERSION, "root": str(settings.root), "base": found.base, "id": found.id,
              "taken_at": found.taken_at, "dirs": found.dirs, "names": found.names,
              "keys": found.keys, "ask": ask.tobytes(), "loose": loose.tobytes()}
    try:
        write_marshal(_path(settings), record)
    except WrenmemError:
        pass


def find_pair(settings: Settings, target: str,
              closest: Callable[[str], Sequence[Any]]) -> Pair:
    """``Memory.get``: the pair of the file ``target`` (relative to the cwd or the project)
    or the one pair asking the question ``target`` (exactly, else but for case); otherwise
    a WrenmemError that lists the candidates, or names the ``closest`` hits."""
    for candidate in (Path(target), settings.root / target):
        if os.path.lexists(candidate) and not candidate.is_dir():  # a FIFO: say so
            return read_pair_file(candidate, settings.relpath(candidate),
                                  settings.max_pair_bytes, inside=settings.root)[0]
    # Every pair asking this question, exactly or but for case, is among those
    # :func:`asking` reads (no scan of the catalog).
    found, by_case = matching_pairs(asking(settings, target), target)
    if len(found) == 1:
        return found[0]
    if found:
        how = " (they differ only in case)" if by_case else ""
        listing = "".join(f"\n  {p.path}  ({p.nl})" for p in found)
        raise WrenmemError(f"{target!r} matches {len(found)} stored questions{how}: "
                           f"nothing done; name one by its file path:{listing}")
    close = closest(target)
    hint = ("; closest: " + "; ".join(f"{h.path} ({h.question})" for h in close)
            if close else "")
    raise WrenmemError(f"no pair file or stored question matches {target!r}{hint}")
