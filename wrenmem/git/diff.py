"""``wrenmem diff``: the pairs a branch adds, changes and removes, validated, for review.

The base (by default the merge base, as ``git diff BASE...HEAD``) is compared by path with a
head revision or the working tree. A file moved with the same question and SQL, or edited on
the way (same question, or mostly the same text), is "moved". Added, changed and moved pairs
are validated against the head's manifest. A verification on the head side is settled only
when the base has the same stamp; otherwise it is claimed by the commit that introduced it
(docs/security.md#verification). ``allow-writes: true`` is flagged, never a plain check mark."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from wrenmem.checks.rules import IGNORE_KEY, parse_codes
from wrenmem.checks.uses import affected_by_change
from wrenmem.checks.validate import Problem, Validator
from wrenmem.errors import ManifestError, PairError, UnreadableFileError, WrenmemError
from wrenmem.fs.fsutil import check_size
from wrenmem.git.knowledge_diff import (
    KnowledgeChange,
    compare_knowledge,
    knowledge_files_at,
    knowledge_files_here,
)
from wrenmem.pairs.catalog import SKIPPED_NAMES, iter_pair_files
from wrenmem.pairs.pairfile import (
    CLAIMED,
    VERIFIED_AT,
    VERIFIED_BY,
    Pair,
    decode_file,
    parse_pair,
    read_pair_bytes,
)
from wrenmem.pairs.trust import stamp_recorded
from wrenmem.schema.manifest import Manifest, load_manifest, manifest_too_large
from wrenmem.settings import Settings


@dataclass(frozen=True)
class Side:
    """One side of the comparison: a revision, or the working tree (``commit`` None)."""

    label: str
    commit: str | None
    files: Mapping[str, bytes | PairError]  # project-relative path -> raw bytes (or why not)


class BlobTooLarge(PairError):
    """A committed pair file over ``max_pair_bytes``, refused from its size before a byte
    of it is read; the same blob on both sides is no change."""

    def __init__(self, path: str, reason: str, blob: str):
        super().__init__(path, reason)
        self.blob = blob

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BlobTooLarge) and other.blob == self.blob

    def __hash__(self) -> int:
        return hash(self.blob)


@dataclass(frozen=True)
class Entry:
    """One pair file that differs between the two sides."""

    status: str  # added | changed | removed | moved
    path: str
    pair: Pair | None  # the head version (the base version for removed)
    old: Pair | None = None  # the base version, for changed and moved
    old_path: str | None = None  # for moved
    problems: tuple[Problem, ...] = ()
    # a verification this change adds or alters: who claims it (a commit's author and
    # commit, or "the working tree (not committed)"); the pair is then not verified
    claimed_in: str | None = None

    @property
    def valid(self) -> bool:
        return not any(p.is_error for p in self.problems)

    @property
    def edited(self) -> bool:
        """A moved file whose question or SQL changed too."""
        return bool(self.old and self.pair and (
            self.old.nl != self.pair.nl or not _same_sql(self.old.sql, self.pair.sql)))

    @property
    def needs_review(self) -> bool:
        """Not verified, and written by something other than a person (``source`` is not
        ``user``, or ``reviewed: false``) or edited since it was verified."""
        return self.status != "removed" and self.pair is not None and self.pair.unreviewed

    def verification(self) -> dict[str, Any] | None:
        """What the head side says of its verification: settled or claimed, by whom."""
        pair = self.pair
        if self.status == "removed" or pair is None or not pair.verification_intact:
            return None
        return {"state": "claimed" if self.claimed_in else "settled",
                "verified_by": str(pair.extra.get(VERIFIED_BY)),
                "verified_at": pair.extra.get(VERIFIED_AT), "claimed_by": self.claimed_in}

    def sql_diff(self) -> list[str]:
        """Unified diff of the SQL, base → head (empty unless the SQL changed)."""
        if self.old is None or self.pair is None or _same_sql(self.old.sql, self.pair.sql):
            return []
        return list(difflib.unified_diff(self.old.sql.splitlines(), self.pair.sql.splitlines(),
                                         "base", "head", n=3, lineterm=""))[2:]

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "status": self.status, "path": self.path,
            "nl": self.pair.nl if self.pair else None,
            "sql": self.pair.sql if self.pair else None,
            "dialect": self.pair.dialect if self.pair else None,
            "source": self.pair.source if self.pair else None,
            "tags": list(self.pair.tags) if self.pair else [],
            "needs_review": self.needs_review,
            "verified": bool(self.pair and self.pair.verified),
            "verification": self.verification(),
            "allows_writes": bool(self.pair and self.pair.allows_writes),
            "ignores": silenced(self.pair),
            "valid": self.valid, "problems": [p.to_dict() for p in self.problems],
        }
        if self.status in ("changed", "moved"):
            data["old_path"] = self.old_path or self.path
            data["old_nl"] = self.old.nl if self.old else None
            data["old_sql"] = self.old.sql if self.old else None
            data["question_changed"] = bool(self.old and self.pair and self.old.nl != self.pair.nl)
            data["sql_changed"] = bool(self.sql_diff())
            data["sql_diff"] = self.sql_diff()
        return data


@dataclass(frozen=True)
class PairDiff:
    """What ``diff`` found; entries sorted by path within each status."""

    base: Side
    head: Side
    entries: tuple[Entry, ...] = field(default_factory=tuple)
    metadata_only: tuple[str, ...] = ()  # edited files whose question and SQL did not change
    warnings: tuple[str, ...] = ()  # e.g. a manifest that could not be used
    # Pairs (changed or not) using a table or column the manifest changed from base to
    # head: (path, question, what happened to each item).
    schema_affected: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    knowledge: tuple[KnowledgeChange, ...] = ()  # rules, glossary terms… added/changed/removed

    def of(self, status: str) -> list[Entry]:
        return [e for e in self.entries if e.status == status]

    @property
    def invalid(self) -> list[Entry]:
        return [e for e in self.entries if e.status != "removed" and not e.valid]

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": {"rev": self.base.label, "commit": self.base.commit},
            "head": {"rev": self.head.label, "commit": self.head.commit},
            **{status: [e.to_dict() for e in self.of(status)]
               for status in ("added", "changed", "removed", "moved")},
            "metadata_only": list(self.metadata_only),
            "schema_affected": [{"path": p, "nl": nl, "changes": list(c)}
                                for p, nl, c in self.schema_affected],
            "invalid": len(self.invalid),
            "warnings": list(self.warnings),
            "knowledge": [c.to_dict() for c in self.knowledge],
        }


def diff_pairs(settings: Settings, base: str | None = None, head: str | None = None, *,
               merge_base: bool = True, check_schema: bool = True) -> PairDiff:
    """Compare the pair files of ``base`` (default HEAD) with ``head`` (default: the working
    tree). Raises :class:`WrenmemError` for an unknown revision or outside a repository."""
    import git

    try:
        repo = git.Repo(settings.root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as e:
        raise WrenmemError(f"{settings.root} is not inside a git repository: run `git init` "
                           "and commit the pair files first (diff compares revisions)") from e
    if repo.working_tree_dir is None:
        raise WrenmemError("a bare repository has no pair files to compare")
    top = Path(repo.working_tree_dir).resolve()
    try:
        project = settings.root.resolve().relative_to(top).as_posix()
        knowledge = settings.knowledge_path.relative_to(top).as_posix()
    except ValueError as e:
        raise WrenmemError(f"{settings.knowledge_path} is outside the repository {top}") from e
    head_commit = _commit(repo, head or "HEAD")
    base_commit = _commit(repo, base or "HEAD")
    base_label = base or "HEAD"
    if merge_base and base is not None:
        common = repo.merge_base(base_commit, head_commit)
        if common and common[0].hexsha != base_commit.hexsha:
            base_commit = common[0]
            base_label = f"{base}...{head or 'HEAD'} (merge base {base_commit.hexsha[:7]})"
    limit = settings.max_pair_bytes
    base_side = Side(base_label, base_commit.hexsha,
                     _files_at(base_commit, knowledge, project, limit))
    if head is None:
        files = {settings.relpath(p): _read_working(p, settings)
                 for p in iter_pair_files(settings.knowledge_path)}
        head_side = Side("working tree", None, files)
        validator = Validator(settings, check_schema=check_schema)
        validator.load_manifest()
        head_knowledge = knowledge_files_here(settings)
    else:
        head_side = Side(head, head_commit.hexsha,
                         _files_at(head_commit, knowledge, project, limit))
        validator = _validator_at(settings, head_commit, top, check_schema)
        head_knowledge = knowledge_files_at(head_commit, settings, project)
    changes = compare_knowledge(knowledge_files_at(base_commit, settings, project),
                                head_knowledge, settings)
    def claimant(path: str, stamp: str) -> str | None:
        if head is None:  # the working tree: what `wrenmem verify` made here is settled
            return None if stamp_recorded(settings, stamp) else (
                "the working tree (not committed)")
        return _introduced_by(repo, base_commit, head_commit, _in_repo(project, path), stamp)

    result = replace(_compare(base_side, head_side, validator, claimant), knowledge=changes)
    if not check_schema:
        return result
    old = _manifest_at(settings, base_commit, top)
    if old is None or validator.manifest_problem is not None or (
            validator.manifest is not None
            and old.fingerprint == validator.manifest.fingerprint):
        return result
    return replace(result, schema_affected=_affected(old, validator, head_side))


def _affected(old: Manifest, validator: Validator, head: Side
              ) -> tuple[tuple[str, str, tuple[str, ...]], ...]:
    """The head's pairs that use an item of ``old`` the head's manifest changed."""
    pairs = [p for path, data in sorted(head.files.items())
             if (p := _quiet_parse(path, data)) is not None]
    found = affected_by_change(old, validator.manifest, pairs, validator.dialect_of)
    return tuple((p.path, p.nl, tuple(changes)) for p, changes in found)


def _in_repo(project: str, path: str) -> str:
    return path if project == "." else f"{project}/{path}"


def _introduced_by(repo: Any, base: Any, head: Any, path: str, stamp: str) -> str:
    """``Author <email> in abc1234``: the author of the oldest commit of base..head from
    which on the file at ``path`` carries the verification ``stamp``."""
    found = None
    try:
        for commit in repo.iter_commits(f"{base.hexsha}..{head.hexsha}", paths=path):
            try:
                data = (commit.tree / path).data_stream.read()
                here = parse_pair(decode_file(data, path), path).stamp
            except (KeyError, PairError):
                here = None
            if here != stamp:
                break
            found = commit
    except Exception:  # noqa: BLE001 - git could not say: the head commit's author is shown
        found = None
    commit = found or head
    return f"{commit.author.name} <{commit.author.email}> in {commit.hexsha[:7]}"


def _commit(repo: Any, rev: str) -> Any:
    import git
    from gitdb.exc import BadName

    try:
        return repo.commit(rev)
    except (BadName, ValueError, git.BadObject, git.GitCommandError) as e:
        if not repo.head.is_valid():  # a repository with no commit: nothing names a revision
            raise WrenmemError(f"unknown revision {rev!r}: the repository has no commit yet, "
                               "so there is nothing to compare with (commit first)") from e
        raise WrenmemError(f"unknown revision {rev!r}") from e


def _files_at(commit: Any, knowledge: str, project: str, limit: int
              ) -> dict[str, bytes | PairError]:
    """Pair files of the knowledge folder at ``commit``, keyed by project-relative path; one
    over ``limit`` bytes is a :class:`BlobTooLarge` (as a working-tree file over it is
    refused), decided from the blob's size in the tree."""

    try:
        tree = commit.tree / knowledge
    except KeyError:
        return {}
    files: dict[str, bytes | PairError] = {}
    for item in tree.traverse():
        if item.type != "blob" or not item.path.endswith(".md"):
            continue
        rel = PurePosixPath(item.path).relative_to(knowledge)
        if any(part.startswith(".") or part.endswith("~") for part in rel.parts) or (
                rel.name.lower() in SKIPPED_NAMES):
            continue
        path = PurePosixPath(item.path)
        key = path.relative_to(project).as_posix() if project != "." else path.as_posix()
        try:
            check_size(item.size, limit)
        except UnreadableFileError as e:
            files[key] = BlobTooLarge(key, e.reason, item.hexsha)
            continue
        files[key] = item.data_stream.read()
    return files


def _validator_at(settings: Settings, commit: Any, top: Path, check_schema: bool) -> Validator:
    """A validator using the manifest as it is at ``commit`` (none if it is not there)."""
    validator = Validator(settings, check_schema=check_schema)
    try:
        return validator.use(_load_at(settings, commit, top))
    except WrenmemError as e:
        validator.use(None).manifest_problem = Problem(
            settings.manifest, 1, 1, f"manifest not usable at {commit.hexsha[:7]}: {e}",
            "manifest")
        return validator


def _manifest_at(settings: Settings, commit: Any, top: Path) -> Manifest | None:
    """The manifest as it is at ``commit`` (None: not there, or not usable)."""
    try:
        return _load_at(settings, commit, top)
    except WrenmemError:
        return None


def _load_at(settings: Settings, commit: Any, top: Path) -> Manifest | None:
    try:
        blob = commit.tree / settings.manifest_path.relative_to(top).as_posix()
    except (KeyError, ValueError):
        return None
    if blob.size > settings.max_manifest_bytes:  # refused before a byte of it is read
        raise ManifestError(manifest_too_large(settings.manifest, blob.size,
                                               settings.max_manifest_bytes))
    return load_manifest(settings.manifest, blob.data_stream.read(),
                         max_bytes=settings.max_manifest_bytes)


def _read_working(path: Path, settings: Settings) -> bytes | PairError:
    """A working-tree file; a FIFO, a device, a dangling link is an error, never a hang."""
    rel = settings.relpath(path)
    try:
        return read_pair_bytes(path, rel, settings.max_pair_bytes, inside=settings.root)
    except PairError as e:
        return e


def _quiet_parse(path: str, data: bytes | PairError) -> Pair | None:
    if isinstance(data, PairError):
        return None
    try:
        return parse_pair(decode_file(data, path), path)
    except PairError:
        return None


def _same_sql(a: str, b: str) -> bool:
    return a.split() == b.split()


def _compare(base: Side, head: Side, validator: Validator,
             claimant: Callable[[str, str], str | None]) -> PairDiff:
    entries: list[Entry] = []
    metadata_only: list[str] = []
    added = sorted(set(head.files) - set(base.files))
    removed = sorted(set(base.files) - set(head.files))
    # Verifications the base already has: settled. Any other on the head side is claimed.
    settled = {p.stamp for path, data in base.files.items()
               if (p := _quiet_parse(path, data)) is not None and p.stamp}

    def claim(new: Pair | None) -> tuple[Pair | None, str | None]:
        if new is None or not new.stamp or new.stamp in settled:
            return new, None
        who = claimant(new.path, new.stamp)
        if who is None:
            return new, None
        return new.with_changes(extra={**new.extra, CLAIMED: True}), who

    for path in sorted(set(head.files) & set(base.files)):
        if head.files[path] == base.files[path]:
            continue
        new, problems = validator.check_bytes(head.files[path], path)
        new, claimed = claim(new)
        old = _quiet_parse(path, base.files[path])
        # Same question and SQL: reported only for a problem (the manifest changed), a
        # claim or an opt-out that appeared.
        if (new is not None and old is not None and old.nl == new.nl
                and _same_sql(old.sql, new.sql) and not problems and not claimed
                and new.allows_writes == old.allows_writes and silenced(new) == silenced(old)):
            metadata_only.append(path)
            continue
        entries.append(Entry("changed", path, new, old, problems=tuple(problems),
                             claimed_in=claimed))
    # A file moved with the same question and SQL is a move, not an add and a remove.
    gone = {path: _quiet_parse(path, base.files[path]) for path in removed}
    by_content = {(p.nl, " ".join(p.sql.split())): path for path, p in gone.items() if p}
    for path in added:
        new, problems = validator.check_bytes(head.files[path], path)
        new, claimed = claim(new)
        key = (new.nl, " ".join(new.sql.split())) if new else None
        old_path = by_content.pop(key, None) if key else None
        if old_path is not None:
            entries.append(Entry("moved", path, new, gone.pop(old_path), old_path,
                                 tuple(problems), claimed))
        else:
            entries.append(Entry("added", path, new, problems=tuple(problems),
                                 claimed_in=claimed))
    _pair_renames(entries, gone)
    for path, old in sorted(gone.items()):
        entries.append(Entry("removed", path, old))
    order = {"added": 0, "changed": 1, "moved": 2, "removed": 3}
    entries.sort(key=lambda e: (order[e.status], e.path))
    warnings = tuple(p.message for p in (validator.manifest_problem, validator.engine_note)
                     if p is not None)
    return PairDiff(base, head, tuple(entries), tuple(metadata_only), warnings)


RENAME_SIMILARITY = 0.6  # question + SQL this alike (difflib ratio): a moved file, edited


def _pair_renames(entries: list[Entry], gone: dict[str, Pair | None]) -> None:
    """Turn an added pair and a removed one into one moved-and-edited pair when they ask the
    same question, or when question and SQL are mostly the same text; best matches first."""
    added = [i for i, e in enumerate(entries) if e.status == "added" and e.pair is not None]
    candidates: list[tuple[float, int, str]] = []
    for i in added:
        new = entries[i].pair
        assert new is not None
        for path, old in gone.items():
            if old is None:
                continue
            if old.nl.strip().casefold() == new.nl.strip().casefold():
                score = 2.0  # the same question: always the same pair
            else:
                score = difflib.SequenceMatcher(
                    None, f"{old.nl}\n{old.sql}", f"{new.nl}\n{new.sql}").ratio()
            if score >= RENAME_SIMILARITY:
                candidates.append((score, i, path))
    taken: set[int] = set()
    for _score, i, path in sorted(candidates, key=lambda c: (-c[0], c[1], c[2])):
        if i in taken or path not in gone:
            continue
        taken.add(i)
        e = entries[i]
        entries[i] = Entry("moved", e.path, e.pair, gone.pop(path), path, e.problems,
                           e.claimed_in)


def silenced(pair: Pair | None) -> list[str]:
    """The check codes a pair's own ``wrenmem-ignore`` names (a pull request writes that key
    too: shown, never a plain check mark); [] when none or unreadable."""
    if pair is None or pair.extra.get(IGNORE_KEY) is None:
        return []
    try:
        return sorted(parse_codes(pair.extra[IGNORE_KEY]))
    except ValueError:
        return [str(pair.extra[IGNORE_KEY])]
