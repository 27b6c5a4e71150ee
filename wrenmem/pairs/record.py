"""An NL→SQL pair as a record: its fields, review keys and fingerprints, its text as
keyword search weighs it (read and written as a file by :mod:`wrenmem.pairs.pairfile`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

KNOWN_KEYS = ("nl", "also", "datasource", "dialect", "tags", "source", "created_at",
              "verified_by", "verified_at")
# Review status (docs/file-format.md); ``verified_sql``, older versions' SQL-only
# fingerprint, is read, never trusted.
VERIFIED_BY, VERIFIED_AT, VERIFIED_PAIR, VERIFIED_SQL, VERIFIED_SCHEMA = (
    "verified_by", "verified_at", "verified_pair", "verified_sql", "verified_schema")
REVIEWED, ALLOW_WRITES = "reviewed", "allow-writes"
REVIEW_KEYS = (VERIFIED_BY, VERIFIED_AT, VERIFIED_PAIR, VERIFIED_SQL, VERIFIED_SCHEMA, REVIEWED)
# In ``extra``, set by :func:`wrenmem.pairs.trust.settle` (never read from a file): the
# verification is only claimed (docs/security.md#verification).
CLAIMED = "\x00claimed"


@dataclass(frozen=True)
class Pair:
    """One NL→SQL pair as read from (or about to be written to) a file."""

    nl: str
    sql: str
    path: str = ""
    datasource: str | None = None
    dialect: str | None = None
    tags: tuple[str, ...] = ()
    source: str = "user"
    created_at: str | None = None
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    sql_line: int = 1  # line of the file where the SQL text starts
    wren_format: bool = False  # SQL was in the front matter
    # YAML comments of the front matter, kept when the file is rewritten: (key, text,
    # inline). A comment is written before its key's line, or after it when inline; the
    # key "" (or one no longer written) puts it at the end of the front matter.
    comments: tuple[tuple[str, str, bool], ...] = field(default=(), compare=False)
    # Other phrasings of the same question (front matter ``also:``): searched with the pair.
    also: tuple[str, ...] = ()

    @cached_property
    def content_hash(self) -> str:
        """Hash of everything the index stores about the pair (not notes, not timestamps),
        computed once. ``also``, verified, claimed and allow-writes are added only when present,
        so every other pair keeps the hash earlier versions computed."""
        fields: list[Any] = [self.nl, self.sql, self.datasource, self.dialect,
                             list(self.tags), self.source]
        if self.also:
            fields.append(list(self.also))
        if self.verified:
            fields.append("verified")
        elif self.claimed_by:
            fields.append(["claimed", self.claimed_by])
        if self.allows_writes:
            fields.append("allow-writes")
        payload = json.dumps(fields, ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()

    @property
    def verification_intact(self) -> bool:
        """The file says a person verified this very pair: ``verified_by`` is set and
        ``verified_pair`` is the fingerprint of the question, phrasings, SQL, dialect and datasource
        as they are now. Whether it is settled is :attr:`verified`."""
        if not self.extra.get(VERIFIED_BY):
            return False
        recorded = self.extra.get(VERIFIED_PAIR)
        return recorded is not None and str(recorded) == pair_fingerprint(self)

    @property
    def verified(self) -> bool:
        """Verified (:attr:`verification_intact`) and settled, not only claimed
        (:func:`wrenmem.pairs.trust.settle`)."""
        return self.verification_intact and not self.extra.get(CLAIMED)

    @property
    def claimed_by(self) -> str | None:
        """The ``verified_by`` of an intact verification that is only claimed."""
        if self.extra.get(CLAIMED) and self.verification_intact:
            return str(self.extra.get(VERIFIED_BY))
        return None

    @property
    def old_fingerprint(self) -> bool:
        """Verified without ``verified_pair`` (by an older version or by hand): the pair
        needs ``wrenmem verify`` again."""
        return bool(self.extra.get(VERIFIED_BY)) and self.extra.get(VERIFIED_PAIR) is None

    @property
    def stamp(self) -> str | None:
        """What identifies this verification (who, when, what); None unless intact."""
        if not self.verification_intact:
            return None
        payload = json.dumps([str(self.extra.get(VERIFIED_BY)), str(self.extra.get(
            VERIFIED_AT) or ""), str(self.extra.get(VERIFIED_PAIR))], ensure_ascii=False)
        return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:24]

    @property
    def unreviewed(self) -> bool:
        """Waiting for a person: ``reviewed: false``, a source other than ``user``, or edited
        since it was verified."""
        if self.verified:
            return False
        return (self.extra.get(REVIEWED) is False or self.source != "user"
                or bool(self.extra.get(VERIFIED_BY)))

    @property
    def allows_writes(self) -> bool:
        """``allow-writes: true`` in the front matter: this pair's SQL may write."""
        return self.extra.get(ALLOW_WRITES) is True

    def to_dict(self) -> dict[str, Any]:
        """Stable JSON shape used by ``--json`` outputs."""
        return {
            "path": self.path,
            "nl": self.nl,
            "sql": self.sql,
            "datasource": self.datasource,
            "dialect": self.dialect,
            "tags": list(self.tags),
            "source": self.source,
            "created_at": self.created_at,
            "verified": self.verified,
        }

    def with_changes(self, **changes: Any) -> Pair:
        return replace(self, **changes)


def sql_fingerprint(sql: str) -> str:
    """A short hash of a SQL text, blind to whitespace (re-indenting keeps a pair verified)."""
    return hashlib.sha256(" ".join(sql.split()).encode("utf-8")).hexdigest()[:16]


def pair_fingerprint(pair: Pair) -> str:
    """``verified_pair``: a short hash of the question, phrasings, SQL, dialect and
    datasource, blind to whitespace in the texts."""
    fields = [" ".join(pair.nl.split()), [" ".join(a.split()) for a in pair.also],
              " ".join(pair.sql.split()), pair.dialect or "", pair.datasource or ""]
    payload = json.dumps(["pair-v2", *fields], ensure_ascii=False)
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def search_fields(pair: Pair) -> dict[str, str]:
    """The pair's text by field, as keyword search weighs it."""
    return {"nl": "\n".join((pair.nl, *pair.also)), "sql": pair.sql,
            "tags": " ".join(pair.tags)}
