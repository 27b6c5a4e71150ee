"""Read the pairs of a Wren memory store (``wren memory``'s LanceDB folder, by default
``.wren/memory``) for ``wrenmem import --from-wren``.

Table ``query_history``: its ``tags`` hold ``source:<source>`` and/or the user's tags. The
newest row of a question is the pair; older rows with another SQL are reported as superseded."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wrenmem.errors import WrenmemError
from wrenmem.pairs.pairfile import Pair, canonical_time
from wrenmem.pairs.store import clean_pair
from wrenmem.pairs.text import question_key
from wrenmem.storage.lance import import_lancedb, table_names

QUERY_TABLE = "query_history"
COLUMNS = ("nl_query", "sql_query", "datasource", "created_at", "tags")
SEED_SOURCES = ("seed",)  # Wren's generated pairs: the manifest makes them again


@dataclass
class WrenStore:
    """The pairs read from a Wren store, and what was left out and why."""

    pairs: list[Pair] = field(default_factory=list)
    rows: int = 0
    seeds: int = 0  # seed rows left out (without include_seed)
    empty: int = 0  # rows without a question or an SQL
    superseded: list[tuple[str, str]] = field(default_factory=list)  # (question, created_at)


def read_wren_store(path: Path, *, include_seed: bool = False) -> WrenStore:
    """The pairs of the Wren store at ``path`` (a LanceDB folder), newest row per question,
    in the order Wren's ``export`` writes them (oldest first)."""
    if not path.is_dir():
        raise WrenmemError(f"{path}: no Wren memory store here (expected the LanceDB folder "
                           "Wren writes, by default .wren/memory)")
    lancedb = import_lancedb()
    db = lancedb.connect(str(path))
    if QUERY_TABLE not in table_names(db):
        raise WrenmemError(f"{path}: no {QUERY_TABLE!r} table: not a Wren memory store, or "
                           f"it holds no pairs (tables: {', '.join(table_names(db)) or 'none'})")
    table = db.open_table(QUERY_TABLE)
    present = set(table.schema.names)
    missing = [c for c in ("nl_query", "sql_query") if c not in present]
    if missing:
        raise WrenmemError(f"{path}: table {QUERY_TABLE!r} has no column "
                           f"{', '.join(missing)}: not Wren's layout")
    wanted = [c for c in COLUMNS if c in present]
    rows = table.to_arrow().select(wanted).to_pylist()
    out = WrenStore(rows=len(rows))
    rows.sort(key=lambda r: _when(r.get("created_at")))
    newest: dict[str, tuple[Pair, dict[str, Any]]] = {}
    for n, row in enumerate(rows, 1):
        nl, sql = (row.get("nl_query") or "").strip(), (row.get("sql_query") or "").strip()
        if not nl or not sql:
            out.empty += 1
            continue
        source, tags = _source_and_tags(row.get("tags"))
        if source in SEED_SOURCES and not include_seed:
            out.seeds += 1
            continue
        created = _iso(row.get("created_at"))
        try:
            pair = clean_pair(Pair(nl=nl, sql=sql, datasource=row.get("datasource") or None,
                                   tags=tags, source=source, created_at=created))
        except WrenmemError as e:
            raise WrenmemError(f"{path}: {QUERY_TABLE} row {n} ({nl[:60]}): {e}") from e
        key = question_key(nl)
        old = newest.get(key)
        if old is not None and old[0].sql != pair.sql:
            out.superseded.append((old[0].nl, old[0].created_at or ""))
        if old is not None:  # the same question again: the newest row's fields, all tags
            merged = tuple(dict.fromkeys([*old[0].tags, *pair.tags]))
            pair = pair.with_changes(tags=merged)
        newest[key] = (pair, row)
    out.pairs = [pair for pair, _row in newest.values()]
    return out


def _source_and_tags(value: Any) -> tuple[str, tuple[str, ...]]:
    """Wren's ``tags`` cell: ``source:<s>`` and/or the user's comma-separated tags."""
    source, tags = "user", []
    for token in str(value or "").replace(",", " ").split():
        if token.startswith("source:"):
            source = token[len("source:"):] or "user"
        else:
            tags.append(token)
    return source, tuple(dict.fromkeys(tags))


def _iso(value: Any) -> str | None:
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        return canonical_time(value.astimezone(dt.UTC).isoformat())
    return canonical_time(str(value))


def _when(value: Any) -> float:
    if isinstance(value, dt.datetime):
        return (value if value.tzinfo else value.replace(tzinfo=dt.UTC)).timestamp()
    try:
        return dt.datetime.fromisoformat(str(value)).timestamp() if value else 0.0
    except ValueError:
        return 0.0
