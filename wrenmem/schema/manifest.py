"""Reading a manifest file (a Wren MDL's JSON, or another schema source) into the records
of :mod:`wrenmem.schema.mdl`; :mod:`wrenmem.schema.mdlparse` reads the decoded document."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from wrenmem.errors import ManifestError, ManifestNotFoundError, UnreadableFileError
from wrenmem.fs.encoding import not_utf8
from wrenmem.fs.fsutil import read_regular_file
from wrenmem.lazy import lazies
from wrenmem.schema import sources
from wrenmem.schema.mdl import (  # noqa: F401 (the records, imported from here by most callers)
    DATASOURCE_DIALECTS,
    JOIN_TYPES,
    MAX_ITEM_CHARS,
    SECTIONS,
    Column,
    Cube,
    CubeField,
    Manifest,
    Model,
    Relationship,
    View,
    per_model,
)
from wrenmem.schema.mdlparse import fingerprint, parse_manifest  # noqa: F401
from wrenmem.settings import MAX_MANIFEST_BYTES

if TYPE_CHECKING:
    from wrenmem.schema.sources import database, dbt, ddl
else:  # the readers of a dbt manifest, of SQL DDL and of a database: only for such a file
    database, dbt, ddl = lazies("wrenmem.schema.sources", "database dbt ddl")


# Where a manifest comes from and how to name another, for "not found" (CLI, API and MCP).
MANIFEST_HINT = ("a Wren MDL manifest, as Wren's `wren` CLI builds it into target/mdl.json, "
                 "or a dbt target/manifest.json, a SQL DDL file, a DuckDB or SQLite database; "
                 "name another with --manifest PATH or the `manifest` setting "
                 "(WRENMEM_MANIFEST, or manifest = \"...\" in wrenmem.toml)")


def read_manifest_bytes(path: Path, max_bytes: int = MAX_MANIFEST_BYTES) -> bytes:
    """The manifest file's bytes; raises :class:`ManifestError` naming the file when it is
    missing, not a regular file, or larger than ``max_bytes`` (checked before reading).
    A DuckDB or SQLite database gives its schema as a Wren MDL's JSON instead."""
    kind = sources.file_database_kind(path)
    if kind is not None:
        return _database_json(path, kind, max_bytes)
    try:
        return read_regular_file(path, max_bytes, "max_manifest_bytes")
    except UnreadableFileError as e:
        raise ManifestError(f"{path}: manifest {e.reason.replace('file too large', 'too large')}"
                            ) from e
    except FileNotFoundError as e:
        raise ManifestNotFoundError(f"{path}: manifest not found ({MANIFEST_HINT})") from e
    except OSError as e:
        raise ManifestError(f"{path}: cannot read manifest: {e.strerror or e}") from e


def load_manifest(path: str | Path, data: bytes | None = None, *,
                  max_bytes: int = MAX_MANIFEST_BYTES,
                  reuse: Mapping[str, Model] | None = None) -> Manifest:
    """Read a manifest file (or its ``data``, already read), of at most ``max_bytes`` (the
    ``max_manifest_bytes`` setting). Raises :class:`ManifestError` naming the file and the
    problem. ``reuse``: models of an earlier read by their key (see :func:`parse_manifest`)."""
    path = Path(path)
    if data is None:
        data = read_manifest_bytes(path, max_bytes)
    else:
        kind = sources.database_kind(data[:16])
        if kind is not None:  # a database's bytes (a committed one, from git): its schema
            data = _database_json(path, kind, max_bytes, data)
        elif len(data) > max_bytes:
            raise ManifestError(manifest_too_large(path, len(data), max_bytes))
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise ManifestError(f"{path}: manifest is {not_utf8(data, e)}") from e
    if text.lstrip()[:1] not in ("{", "["):  # not JSON: SQL DDL, or nothing readable
        return parse_manifest(ddl.ddl_document(text, str(path)), str(path))
    try:
        # Keys starting with "_" are dropped while decoding (the fingerprint ignores them);
        # without such a key or an escaped surrogate the C decoder alone reads it, 3x faster
        hooked = '"_' in text or _ESCAPED_SURROGATE.search(text) is not None
        document = json.JSONDecoder(object_pairs_hook=_public_object if hooked else None,
                                    parse_int=_parse_int).decode(text)
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}:{e.lineno}:{e.colno}: manifest is not valid JSON: "
                            f"{e.msg}") from e
    except RecursionError as e:
        raise ManifestError(f"{path}: manifest is nested too deeply") from e
    if isinstance(document, list):  # the hook cleaned every object, not a top-level list
        document = _clean_value(document)
    if sources.is_dbt_manifest(document):
        return parse_manifest(dbt.dbt_document(document, str(path)), str(path), _public=True)
    return parse_manifest(document, str(path), _public=True, reuse=reuse)


class KeptManifest:
    """The manifest a long-lived ``Memory`` loaded, kept while the file's stat stays the
    same, with what callers derived from it (:meth:`derived`: the validator of ``store``)."""

    def __init__(self) -> None:
        self._held: tuple[tuple[Any, ...], Manifest, dict[str, Any]] | None = None

    def load(self, path: Path, max_bytes: int) -> Manifest:
        try:
            st = path.stat()
            key: tuple[Any, ...] = (str(path), st.st_size, st.st_mtime_ns, st.st_ctime_ns)
        except OSError:
            return load_manifest(path, max_bytes=max_bytes)  # its error names the file
        if self._held is None or self._held[0] != key:
            self._held = (key, load_manifest(path, max_bytes=max_bytes), {})
        return self._held[1]

    def derived(self, manifest: Manifest | None) -> dict[str, Any]:
        """What is kept with ``manifest`` (empty for another one)."""
        held = self._held
        return held[2] if held is not None and held[1] is manifest else {}


def _database_json(path: Path, kind: str, max_bytes: int, data: bytes | None = None) -> bytes:
    """The schema of the database at ``path`` (or of its bytes ``data``, copied to a
    temporary file) as MDL JSON of at most ``max_bytes``."""
    if data is None:
        document = database.database_document(path, kind)
    else:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="wrenmem-db-") as folder:
            copy = Path(folder) / path.name
            copy.write_bytes(data)
            document = database.database_document(copy, kind)
    out = json.dumps(document, ensure_ascii=False, sort_keys=True).encode("utf-8")
    if len(out) > max_bytes:
        raise ManifestError(manifest_too_large(path, len(out), max_bytes)
                            .replace("manifest too large", "the database's schema is too large"))
    return out


def manifest_too_large(path: str | Path, size: int, limit: int) -> str:
    """The message for a manifest of ``size`` bytes, over ``limit``."""
    return (f"{path}: manifest too large ({size:,} bytes; the limit is the "
            f"max_manifest_bytes setting, {limit:,})")


def _public_object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # JSON may spell lone UTF-16 surrogates ("\\ud800"): such strings cannot be printed,
    # written or hashed as UTF-8, so they become U+FFFD here, once, for every later reader.
    return {_clean(k): _clean_value(v) for k, v in pairs if not k.startswith("_")}


_SURROGATE = re.compile("[\ud800-\udfff]")
# What the cleaning hook is for: a key starting with "_" (this also matches such text inside
# a string value; that only costs the slower decode) or a surrogate spelled as an escape.
# Valid UTF-8 cannot hold a raw surrogate, so the escape is the only way one gets in.
_ESCAPED_SURROGATE = re.compile(r"\\[uU][dD][89a-fA-F]")
# Python refuses to convert integers longer than this (CVE-2020-10735); a longer literal in
# a manifest is read as a float (inf), not a crash.
_MAX_INT_DIGITS = 4000


def _parse_int(literal: str) -> int | float:
    return int(literal) if len(literal) <= _MAX_INT_DIGITS else float(literal)


def _clean(text: str) -> str:
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text


def _clean_value(value: Any) -> Any:
    """Strings with surrogates replaced; objects are already clean (the hook ran on them)."""
    if isinstance(value, str):
        return _clean(value)
    if isinstance(value, list):
        return [_clean_value(v) for v in value]
    return value
