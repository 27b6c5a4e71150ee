"""Which verifications recall trusts: settled ones, not ones a file merely claims
(docs/security.md#verification).

A ``verified_pair`` fingerprint is an unkeyed hash anyone can write, so a verification is
**settled** only when the file as committed at ``HEAD`` carries the same stamp, or
``wrenmem verify`` made it here (recorded in ``.wrenmem/verifications.json``, which no pair
file and no MCP tool can write); any other is **claimed**. Stamps found settled, and those
found not settled with the ``HEAD`` they were checked at, are kept in that record: git is
asked (one ``git cat-file --batch``) only about stamps it does not know at ``HEAD``."""

from __future__ import annotations

import json
import logging
import subprocess
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
    carries as committed at HEAD: one ``git cat-file --batch`` for all of them."""
    names = [p.path for p in pairs if "\n" not in p.path]
    if not names:
        return set()
    request = "".join(f"HEAD:./{name}\n" for name in names).encode("utf-8")
    try:
        out = subprocess.run(["git", "cat-file", "--batch"], cwd=root, input=request,
                             capture_output=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError) as e:
        log.debug("git cat-file failed: %s", e)
        return set()
    blobs = _batch_blobs(out, len(names))
    found: set[str] = set()
    for pair, data in zip((p for p in pairs if "\n" not in p.path), blobs, strict=False):
        if data is None:
            continue
        try:
            committed = parse_pair(decode_file(data, pair.path), pair.path)
        except Exception:  # noqa: BLE001 - a committed file that does not parse settles nothing
            continue
        if committed.stamp is not None and committed.stamp == pair.stamp:
            found.add(str(pair.stamp))
    return found


def _batch_blobs(out: bytes, count: int) -> list[bytes | None]:
    """The objects of a ``git cat-file --batch`` answer, None for a missing one."""
    blobs: list[bytes | None] = []
    at = 0
    while len(blobs) < count and at < len(out):
        end = out.find(b"\n", at)
        if end < 0:
            break
        header = out[at:end].split()
        at = end + 1
        if len(header) == 3 and header[1] == b"blob":
            size = int(header[2])
            blobs.append(out[at:at + size])
            at += size + 1
        elif len(header) == 3:  # a tree or another type: skip its body
            at += int(header[2]) + 1
            blobs.append(None)
        else:  # "<name> missing"
            blobs.append(None)
    return blobs + [None] * (count - len(blobs))


def head_commit(root: Path) -> str | None:
    """The commit HEAD names, read from the ``.git`` files (no git process); None outside
    a repository. A HEAD these reads cannot resolve is ``"?"`` (asked of git every time)."""
    git_dir = _git_dir(root)
    if git_dir is None:
        return None
    try:
        head = (git_dir / "HEAD").read_text(encoding="utf-8").strip()
        if not head.startswith("ref:"):
            return head or "?"
        ref = head[4:].strip()
        common = git_dir
        if (git_dir / "commondir").is_file():
            common = (git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip())
        for base in (git_dir, common):
            if (base / ref).is_file():
                return (base / ref).read_text(encoding="utf-8").strip() or "?"
        packed = common / "packed-refs"
        if packed.is_file():
            for line in packed.read_text(encoding="utf-8").splitlines():
                parts = line.split()
                if len(parts) == 2 and parts[1] == ref:
                    return parts[0]
        return f"unborn:{ref}"
    except (OSError, UnicodeDecodeError):
        return "?"


def _git_dir(root: Path) -> Path | None:
    here = root.resolve()
    for folder in (here, *here.parents):
        dot = folder / ".git"
        if dot.is_dir():
            return dot
        if dot.is_file():
            try:
                text = dot.read_text(encoding="utf-8").strip()
            except (OSError, UnicodeDecodeError):
                return None
            if text.startswith("gitdir:"):
                target = Path(text[7:].strip())
                return target if target.is_absolute() else (folder / target).resolve()
            return None
    return None


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
