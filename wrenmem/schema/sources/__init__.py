"""Schema sources besides a Wren MDL: a dbt ``manifest.json``, SQL DDL, a DuckDB or SQLite
database file.

Each is read into the document of a Wren MDL (models with columns, relationships, views,
cubes), which :func:`wrenmem.schema.manifest.parse_manifest` then reads like any other:
``describe``, ``fetch``, the name checks and the engine check see one kind of manifest. The
kind is decided by the content, not the file name (:func:`database_kind`,
:func:`is_dbt_manifest`, JSON or not). What a reader skipped or repaired is named in the
document's ``schemaSource.warnings``, which become the manifest's first warnings.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

# What the manifest says it was read from (``Manifest.source``).
DBT = "dbt manifest"
DDL = "SQL DDL"
DUCKDB = "DuckDB database"
SQLITE = "SQLite database"

SQLITE_MAGIC = b"SQLite format 3\x00"
DUCKDB_MAGIC = b"DUCK"  # at offset 8, after the header block's checksum


def database_kind(head: bytes) -> str | None:
    """DUCKDB or SQLITE when ``head`` (a file's first 16 bytes or more) starts one."""
    if head.startswith(SQLITE_MAGIC):
        return SQLITE
    if head[8:12] == DUCKDB_MAGIC:
        return DUCKDB
    return None


def file_database_kind(path: Path) -> str | None:
    """:func:`database_kind` of a regular file's first bytes; None for anything else (a
    FIFO or device is never opened for reading, so it cannot block)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return database_kind(os.read(fd, 16))
    except OSError:
        return None
    finally:
        os.close(fd)


def is_dbt_manifest(document: Any) -> bool:
    """A dbt ``manifest.json``: an object with ``nodes`` and dbt's ``metadata``."""
    if not isinstance(document, dict) or "models" in document:
        return False
    meta = document.get("metadata")
    return isinstance(document.get("nodes"), dict) and isinstance(meta, dict) and (
        "dbt_schema_version" in meta or "dbt_version" in meta)


def source_block(kind: str, warnings: list[str]) -> dict[str, Any]:
    """The ``schemaSource`` entry of a converted document."""
    return {"kind": kind, "warnings": list(warnings)}
