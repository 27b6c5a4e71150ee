"""Which verifications recall trusts: settled ones, not ones a file merely claims
(docs/security.md#verification).

A ``verified_pair`` fingerprint is an unkeyed hash anyone can write, so a verification is
**settled** only when the file as committed at ``HEAD`` carries the same stamp, or
``wrenmem verify`` made it here (recorded in ``.wrenmem/verifications.json``, which no pair
file and no MCP tool can write); any other is **claimed**. Stamps found settled, and those
found not settled with the ``HEAD`` they were checked at, are kept in that record: git is
asked only about stamps it does not know at ``HEAD``."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from wrenmem.fs import statedir
from wrenmem.fs.fsutil import atomic_write_bytes
from wrenmem.pairs.pairfile import CLAIMED, Pair, decode_file, parse_pair
from wrenmem.settings import Settings

log = logging.getLogger(__name__)

RECORD = statedir.VERIFICATIONS
VERSION = 1
MAX_PENDING = 10_000


def settle(settings: Settings, pairs: Sequence[Pair]) -> tuple[Pair, ...]:
    """``pairs``, each claimed verification marked (``extra[CLAIMED]``): one neither
    committed at HEAD nor made here by ``wrenmem verify``."""
    claims = [p for p in pairs if p.verification_intact]
    if not claims:
        return tuple(pairs)
    record = _load(settings)
    settled: set[str] = record["settled"]
    unknown = [p for p in claims if p.stamp not in settled]
    if not unknown:
        return tuple(pairs)
    head = head_commit(settings.root)
    pending: dict[str, str] = record["pending"]
    ask = [p for p in unknown if head is None or pending.get(str(p.stamp)) != head]
    if ask and head is not None:
        committed = committed_stamps(settings.root, ask)
        settled.update(committed)
        for p in ask:
            if p.stamp not in committed:
                pending[str(p.stamp)] = head
        if len(pending) > MAX_PENDING:
            record["pending"] = dict(list(pending.items())[-MAX_PENDING:])
        _save(settings, record)
    claimed = {p.path for p in unknown if p.stamp not in settled}
    return tuple(p.with_changes(extra={**p.extra, CLAIMED: True}) if p.path in claimed
                 and p.verification_intact else p for p in pairs)


def record_verified(settings: Settings, pairs: Iterable[Pair]) -> None:
    """Remember the verifications ``wrenmem verify`` just made: settled on this machine."""
    stamps = {str(p.stamp) for p in pairs if p.stamp}
    if not stamps:
        return
    record = _load(settings)
    record["settled"].update(stamps)
    for s in stamps:
        record["pending"].pop(s, None)
    _save(settings, record)


def stamp_recorded(settings: Settings, stamp: str) -> bool:
    """Whether this verification is known settled here (``wrenmem verify`` made it, or it
    was found committed)."""
    return stamp in _load(settings)["settled"]


def committed_stamps(root: Path, pairs: Sequence[Pair]) -> set[str]:
    """The stamps of ``pairs`` (project-relative paths under ``root``) that the same file
    carries as committed at HEAD, read through GitPython's ``git cat-file --batch``."""
    import git

    found: set[str] = set()
    try:
        repo = git.Repo(root, search_parent_directories=True)
    except (git.GitError, OSError, ValueError) as e:
        log.debug("no repository: %s", e)
        return found
    with repo:
        try:
            top = Path(repo.working_tree_dir or "").resolve()
            inner = root.resolve().relative_to(top).as_posix()
            prefix = "" if inner == "." else inner + "/"
            for pair in pairs:
                name = prefix + pair.path
                if "\n" in name:
                    continue
                try:
                    _sha, kind, _size, data = repo.git.get_object_data(f"HEAD:{name}")
                except ValueError:  # not committed there
                    continue
                if kind not in (b"blob", "blob"):  # bytes, whatever its annotation says
                    continue
                try:
                    committed = parse_pair(decode_file(data, pair.path), pair.path)
                except Exception:  # noqa: BLE001 - a committed file that does not parse settles nothing
                    continue
                if committed.stamp is not None and committed.stamp == pair.stamp:
                    found.add(str(pair.stamp))
        except (git.GitError, OSError, ValueError) as e:
            log.debug("git cat-file failed: %s", e)
    return found


def head_commit(root: Path) -> str | None:
    """The commit HEAD names (GitPython reads the refs, no git process); None outside a
    repository, ``"unborn"`` before the first commit."""
    here = root.resolve()
    if not any((folder / ".git").exists() for folder in (here, *here.parents)):
        return None  # no repository: a recall outside git does not import GitPython
    import git

    try:
        repo = git.Repo(root, search_parent_directories=True)
    except (git.GitError, OSError, ValueError):
        return None
    with repo:
        try:
            return repo.head.commit.hexsha
        except ValueError:
            return "unborn"
        except (git.GitError, OSError):
            return "?"


def _load(settings: Settings) -> dict[str, Any]:
    try:
        data = json.loads((settings.state_dir / RECORD).read_text(encoding="utf-8"))
        if data.get("version") == VERSION:
            return {"settled": {str(s) for s in data.get("settled") or ()},
                    "pending": {str(k): str(v) for k, v in (data.get("pending") or {}).items()}}
    except (OSError, ValueError, AttributeError, TypeError):
        pass
    return {"settled": set(), "pending": {}}


def _save(settings: Settings, record: dict[str, Any]) -> None:
    data = {"version": VERSION, "settled": sorted(record["settled"]),
            "pending": record["pending"]}
    try:
        atomic_write_bytes(settings.state_dir / RECORD,
                           json.dumps(data, sort_keys=True).encode("utf-8"))
    except OSError as e:  # a read-only state folder: recall still answers (conservatively)
        log.debug("verifications not recorded: %s", e)
