"""The schema items a pair's SQL uses, and a fingerprint of each item in the manifest.

Items are tables (``orders``) and columns (``orders.amount``), resolved with sqlglot's
``qualify`` against the manifest, so that aliases, CTEs, subqueries and ``*`` lead back to
the model or view they come from. A verification records the fingerprint of every item the
pair uses; when one of them later changes (type, expression, relationship) or goes away,
the pair is named (rule WM011).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from wrenmem.checks.references import Schema
from wrenmem.errors import WrenmemError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import read_marshal, write_marshal
from wrenmem.pairs.pairfile import Pair
from wrenmem.schema.manifest import Manifest
from wrenmem.settings import Settings

CACHE_VERSION = 1


def used_items(sql: str, dialect: str | None, tables: Mapping[str, Mapping[str, str]],
               schema: Schema | None = None, tree: Any = None) -> tuple[str, ...]:
    """``table`` and ``table.column`` names (as the manifest spells them) that ``sql`` reads,
    sorted; empty when the SQL does not parse. ``tree`` is the parsed SQL (not modified)."""
    from sqlglot import exp

    names = {t.lower(): (t, {c.lower(): c for c in cols}) for t, cols in tables.items()}
    scopes = (schema or Schema(tables)).scopes(sql, dialect, tree)
    if scopes is None:
        return ()
    found: set[str] = set()
    for scope in scopes:
        for source in scope.sources.values():
            if isinstance(source, exp.Table) and source.name.lower() in names:
                found.add(names[source.name.lower()][0])
        for column in scope.columns:
            if not column.table or column.name == "*":
                continue
            origin = scope.sources.get(column.table)
            if not isinstance(origin, exp.Table) or origin.name.lower() not in names:
                continue
            table, columns = names[origin.name.lower()]
            if column.name.lower() in columns:
                found.add(f"{table}.{columns[column.name.lower()]}")
    return tuple(sorted(found, key=str.lower))


def item_fingerprints(manifest: Manifest) -> dict[str, str]:
    """Item name (lower case) -> a short hash of what the manifest says about it: a
    column's type, expression, calculated flag, relationship and the joins naming it; a
    model's primary key; a view's statement (descriptions left out)."""
    out: dict[str, str] = {}
    conditions = [(r.name, r.left, r.right, r.join_type, r.condition.lower())
                  for r in manifest.relationships]
    for model in manifest.models:
        out[model.name.lower()] = _hash(["model", list(model.primary_key)])
        for c in model.columns:
            spelled = f"{model.name}.{c.name}".lower()
            joins = sorted(r for r in conditions if spelled in r[4].replace('"', ""))
            out[f"{model.name}.{c.name}".lower()] = _hash(
                [c.type.upper(), c.expression, c.is_calculated, c.relationship, joins])
    for view in manifest.views:
        out.setdefault(view.name.lower(), _hash(["view", " ".join(view.statement.split())]))
    for name, columns in manifest.table_columns().items():
        for column, kind in columns.items():
            out.setdefault(f"{name}.{column}".lower(), _hash([kind.upper(), "view column"]))
    return out


def changed_items(recorded: Mapping[str, Any], current: Mapping[str, str]) -> list[str]:
    """``item: what happened`` for each recorded item no longer the same in ``current``."""
    out = []
    for item, fingerprint in recorded.items():
        now = current.get(str(item).lower())
        if now is None:
            out.append(f"{item} was removed")
        elif now != str(fingerprint):
            out.append(f"{item} changed")
    return out


def _hash(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


class UsesIndex:
    """The items each pair uses, derived once per (SQL, dialect, manifest) and kept in
    ``.wrenmem/uses.bin``: ``list --uses`` over thousands of pairs reads it, not sqlglot."""

    def __init__(self, settings: Settings, manifest: Manifest):
        self.settings = settings
        self.manifest = manifest
        self.tables = manifest.table_columns()
        self.schema = Schema(self.tables)
        self.path = settings.state_dir / statedir.USES
        data = read_marshal(self.path)
        ok = (isinstance(data, dict) and data.get("version") == CACHE_VERSION
              and data.get("manifest") == manifest.fingerprint)
        self.entries: dict[str, tuple[str, ...]] = dict(data["entries"]) if ok else {}
        self.dirty = False

    def items(self, sql: str, dialect: str | None) -> tuple[str, ...]:
        key = hashlib.sha256(f"{dialect}\0{sql}".encode()).hexdigest()[:24]
        found = self.entries.get(key)
        if found is None:
            found = used_items(sql, dialect, self.tables, self.schema)
            self.entries[key] = tuple(found)
            self.dirty = True
        return tuple(found)

    def save(self) -> None:
        if self.dirty:  # a read-only checkout: not kept, only slower next time
            write_marshal(self.path, {"version": CACHE_VERSION,
                                      "manifest": self.manifest.fingerprint,
                                      "entries": self.entries})
            self.dirty = False


def resolve_items(wanted: list[str], tables: Mapping[str, Mapping[str, str]]) -> list[str]:
    """``orders`` / ``orders.amount`` as the manifest spells them (case-insensitively);
    :class:`WrenmemError` naming an item the manifest does not have."""
    import difflib

    by_lower = {t.lower(): (t, {c.lower(): c for c in cols}) for t, cols in tables.items()}
    out = []
    for item in wanted:
        table, _, column = item.strip().partition(".")
        found = by_lower.get(table.lower())
        if found is None:
            close = difflib.get_close_matches(table.lower(), list(by_lower), n=1)
            hint = f"; did you mean {by_lower[close[0]][0]!r}?" if close else ""
            raise WrenmemError(f"no table {table!r} in the manifest{hint}")
        if not column:
            out.append(found[0])
            continue
        name = found[1].get(column.lower())
        if name is None:
            close = difflib.get_close_matches(column.lower(), list(found[1]), n=1)
            hint = f"; did you mean {found[1][close[0]]!r}?" if close else ""
            raise WrenmemError(f"no column {column!r} in {found[0]!r}{hint}")
        out.append(f"{found[0]}.{name}")
    return out


def pairs_using(uses: UsesIndex, pairs: list[Pair], wanted: list[str],
                dialect_of: Any) -> list[tuple[Pair, tuple[str, ...]]]:
    """The pairs that use any of ``wanted`` (a table matches any of its columns too), each
    with the items of ``wanted`` it uses."""
    resolved = resolve_items(wanted, uses.tables)
    out = []
    for pair in pairs:
        items = {i.lower() for i in uses.items(pair.sql, dialect_of(pair))}
        hits = tuple(w for w in resolved if w.lower() in items)
        if hits:
            out.append((pair, hits))
    uses.save()
    return out


def affected_by_change(old: Manifest, new: Manifest | None, pairs: list[Pair],
                       dialect_of: Any) -> list[tuple[Pair, list[str]]]:
    """Pairs that use an item of ``old`` the ``new`` manifest changed or removed, with what
    happened to each (for ``diff`` when the manifest changes between two revisions)."""
    before = item_fingerprints(old)
    after = item_fingerprints(new) if new is not None else {}
    moved = {k for k, v in before.items() if after.get(k) != v}
    if not moved:
        return []
    tables = old.table_columns()
    schema = Schema(tables)
    out = []
    for pair in pairs:
        items = used_items(pair.sql, dialect_of(pair), tables, schema)
        hits = [f"{i} {'was removed' if i.lower() not in after else 'changed'}"
                for i in items if i.lower() in moved]
        if hits:
            out.append((pair, hits))
    return out
