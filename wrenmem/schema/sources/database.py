"""A DuckDB or SQLite database file, introspected read-only (no data read, nothing written)
into a Wren MDL document (docs/schema-sources.md)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any
from urllib.parse import quote

from wrenmem.errors import ManifestError
from wrenmem.schema.sources import DUCKDB, SQLITE, source_block
from wrenmem.schema.sources.ddl import ddl_document, key_relationships


def sqlite_document(path: Path) -> dict[str, Any]:
    """The MDL document of the SQLite database at ``path``."""
    uri = f"file:{quote(str(path))}?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as e:
        raise ManifestError(f"{path}: cannot open the SQLite database read-only: {e}") from e
    try:
        con.execute("PRAGMA query_only = ON")
        rows = con.execute(
            "SELECT type, name, sql FROM sqlite_master WHERE type IN ('table', 'view') "
            "AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY rowid").fetchall()
        warnings: list[str] = []
        models, views, keys = [], [], []
        for kind, name, sql in rows:
            if kind == "view":
                views.append(_view(name, sql or "", "sqlite", warnings))
                continue
            columns, primary = [], []
            for _cid, column, ctype, notnull, _default, pk in con.execute(
                    f"PRAGMA table_info({_quote(name)})"):
                columns.append({"name": column, "type": ctype or "",
                                "notNull": bool(notnull), "isPrimaryKey": bool(pk)})
                if pk:
                    primary.append((pk, column))
            model: dict[str, Any] = {"name": name, "columns": columns}
            if primary:
                model["primaryKey"] = [c for _, c in sorted(primary)]
            models.append(model)
            grouped: dict[int, list[tuple[str, str, str]]] = {}
            for row in con.execute(f"PRAGMA foreign_key_list({_quote(name)})"):
                grouped.setdefault(row[0], []).append((row[2], row[3], row[4] or ""))
            keys += [(name, fk) for _, fk in sorted(grouped.items())]
    except sqlite3.Error as e:
        raise ManifestError(f"{path}: cannot read the SQLite database: {e}") from e
    finally:
        con.close()
    return _document(models, views, keys, SQLITE, "sqlite", "", warnings)


def duckdb_document(path: Path) -> dict[str, Any]:
    """The MDL document of the DuckDB database at ``path``."""
    try:
        import duckdb
    except ImportError as e:
        raise ManifestError(f"{path}: a DuckDB database, and DuckDB is not installed "
                            "(pip install 'wrenmem[engine]')") from e
    try:
        con = duckdb.connect(str(path), read_only=True,
                             config={"threads": 1, "enable_external_access": False,
                                     "autoload_known_extensions": False})
    except duckdb.Error as e:
        raise ManifestError(f"{path}: cannot open the DuckDB database read-only: "
                            f"{_first_line(e)}") from e
    try:
        row = con.execute("SELECT current_database()").fetchone()
        database = row[0] if row else ""
        tables = con.execute(
            "SELECT schema_name, table_name, comment FROM duckdb_tables() "
            "WHERE database_name = ? AND NOT internal AND NOT temporary "
            "ORDER BY schema_name, table_oid", [database]).fetchall()
        column_rows = con.execute(
            "SELECT schema_name, table_name, column_name, data_type, is_nullable, comment "
            "FROM duckdb_columns() WHERE database_name = ? AND NOT internal "
            "ORDER BY schema_name, table_name, column_index", [database]).fetchall()
        constraints = con.execute(
            "SELECT schema_name, table_name, constraint_type, constraint_column_names, "
            "referenced_table, referenced_column_names FROM duckdb_constraints() "
            "WHERE database_name = ? AND constraint_type IN ('PRIMARY KEY', 'FOREIGN KEY') "
            "ORDER BY schema_name, table_name, constraint_index", [database]).fetchall()
        view_rows = con.execute(
            "SELECT schema_name, view_name, sql, comment FROM duckdb_views() "
            "WHERE database_name = ? AND NOT internal AND NOT temporary "
            "ORDER BY schema_name, view_oid", [database]).fetchall()
    except duckdb.Error as e:
        raise ManifestError(f"{path}: cannot read the DuckDB database: {_first_line(e)}"
                            ) from e
    finally:
        con.close()
    warnings: list[str] = []
    by_table: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for schema, table, column, data_type, nullable, comment in column_rows:
        entry: dict[str, Any] = {"name": column, "type": data_type or "",
                                 "notNull": not nullable}
        if comment:
            entry["properties"] = {"description": comment}
        by_table.setdefault((schema, table), []).append(entry)
    primary: dict[tuple[str, str], list[str]] = {}
    keys = []
    for schema, table, kind, columns, other, to in constraints:
        if kind == "PRIMARY KEY":
            primary[(schema, table)] = list(columns or [])
        elif other:
            keys.append((table, [(other, c, t) for c, t in zip(columns or [], to or [],
                                                               strict=False)]))
    models = []
    for schema, table, comment in tables:
        columns = by_table.get((schema, table), [])
        model: dict[str, Any] = {"name": table, "columns": columns}
        pk = primary.get((schema, table))
        if pk:
            model["primaryKey"] = pk
            for column in columns:
                column["isPrimaryKey"] = column["name"] in pk
        if comment:
            model["properties"] = {"description": comment}
        models.append(model)
    views = []
    for _schema, name, sql, comment in view_rows:
        view = _view(name, sql or "", "duckdb", warnings)
        if comment:
            view["properties"] = {"description": comment}
        views.append(view)
    schemas = sorted({s for s, _, _ in tables})
    return _document(models, views, keys, DUCKDB, "duckdb",
                     schemas[0] if len(schemas) == 1 else "", warnings, catalog=database)


def _view(name: str, sql: str, dialect: str, warnings: list[str]) -> dict[str, Any]:
    """A view's MDL entry: its ``SELECT`` (the column list of ``CREATE VIEW v (a, b)``
    made aliases), read from its ``CREATE VIEW`` text."""
    try:
        views = ddl_document(sql, name, dialect=dialect)["views"]
    except ManifestError:
        views = []
    if not views:
        warnings.append(f"view '{name}': its statement could not be read, kept without it")
        return {"name": name}
    return {**views[0], "name": name}


def _document(models: list[dict[str, Any]], views: list[dict[str, Any]],
              keys: list[tuple[str, list[tuple[str, str, str]]]], kind: str, dialect: str,
              schema: str, warnings: list[str], catalog: str = "") -> dict[str, Any]:
    relationships = key_relationships(
        [(table, tuple(c for _, c, _ in parts), parts[0][0] if parts else "",
          tuple(t for _, _, t in parts) if all(t for _, _, t in parts) else (),
          f"table '{table}': foreign key") for table, parts in keys],
        {m["name"].lower(): m for m in models}, warnings)
    return {"catalog": catalog, "schema": schema, "dataSource": dialect, "models": models,
            "relationships": relationships, "views": views,
            "schemaSource": source_block(kind, warnings)}


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _first_line(error: Exception) -> str:
    lines = str(error).strip().splitlines()
    return lines[0] if lines else type(error).__name__


def database_document(path: Path, kind: str) -> dict[str, Any]:
    """The MDL document of the database file at ``path`` (opened read-only)."""
    return sqlite_document(path) if kind == SQLITE else duckdb_document(path)
