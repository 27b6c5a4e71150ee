"""The Wren MDL manifest, read defensively into small frozen records.

A manifest is JSON (``target/mdl.json``): models with columns, relationships, views and
cubes. Real manifests are often hand-edited, so reading never crashes: a document that is
not a manifest at all raises :class:`ManifestError` naming the element; a single bad item
(not an object, nameless, a relationship whose ``models`` is not two names…) is skipped and
named in ``Manifest.warnings``.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, TypeVar

from wrenmem.errors import ManifestError, ManifestNotFoundError, UnreadableFileError
from wrenmem.fs.encoding import not_utf8
from wrenmem.fs.fsutil import read_regular_file
from wrenmem.schema import rawjson
from wrenmem.settings import MAX_MANIFEST_BYTES

# Wren ``dataSource`` → sqlglot dialect. File sources are queried through DuckDB.
DATASOURCE_DIALECTS = {
    "postgres": "postgres", "postgresql": "postgres", "mysql": "mysql", "mssql": "tsql",
    "sqlserver": "tsql", "bigquery": "bigquery", "snowflake": "snowflake", "trino": "trino",
    "presto": "presto", "clickhouse": "clickhouse", "duckdb": "duckdb", "oracle": "oracle",
    "athena": "athena", "redshift": "redshift", "databricks": "databricks", "spark": "spark",
    "doris": "doris", "starrocks": "starrocks", "sqlite": "sqlite", "teradata": "teradata",
    "local_file": "duckdb", "s3_file": "duckdb", "gcs_file": "duckdb", "minio_file": "duckdb",
    "canner": "trino", "datafusion": "postgres",
}
SECTIONS = ("models", "relationships", "views", "cubes")
# Characters kept of one text of the manifest (a description, an expression, a view's
# statement, a condition): ten times any useful description, a third of what `fetch` returns
# whole. A longer one is cut, marked and warned about (a 48 MB description once took 300 s
# and 4.9 GB on its way to the embedder).
MAX_ITEM_CHARS = 10_000
JOIN_TYPES = ("ONE_TO_ONE", "ONE_TO_MANY", "MANY_TO_ONE", "MANY_TO_MANY")


@dataclass(frozen=True)
class Column:
    name: str
    type: str = ""
    description: str = ""
    is_calculated: bool = False
    expression: str = ""
    relationship: str = ""
    not_null: bool = False
    is_primary_key: bool = False
    is_hidden: bool = False
    accepted_values: tuple[str, ...] = ()
    derived_from: str = ""
    dbt_tests: tuple[str, ...] = ()  # dbt tests declared on the column (unique, not_null…)
    dbt_test_status: str = ""  # their last result, as the dbt import recorded it


@dataclass(frozen=True)
class Model:
    name: str
    columns: tuple[Column, ...] = ()
    primary_key: tuple[str, ...] = ()
    description: str = ""
    layer: str = ""  # dbt layer: raw, staging, mart…
    data_scope: str = ""

    def visible_columns(self) -> tuple[Column, ...]:
        return tuple(c for c in self.columns if not c.is_hidden)


@dataclass(frozen=True)
class Relationship:
    name: str
    left: str
    right: str
    join_type: str = ""
    condition: str = ""
    description: str = ""


@dataclass(frozen=True)
class View:
    name: str
    statement: str = ""
    description: str = ""


@dataclass(frozen=True)
class CubeField:
    name: str
    expression: str = ""
    type: str = ""
    description: str = ""
    granularities: tuple[str, ...] = ()


@dataclass(frozen=True)
class Cube:
    name: str
    base_object: str = ""
    description: str = ""
    measures: tuple[CubeField, ...] = ()
    dimensions: tuple[CubeField, ...] = ()
    time_dimensions: tuple[CubeField, ...] = ()
    hierarchies: tuple[tuple[str, tuple[str, ...]], ...] = ()


@dataclass(frozen=True)
class Manifest:
    """A loaded manifest. ``warnings`` name every item that was skipped or repaired."""

    catalog: str = ""
    schema: str = ""
    data_source: str = ""
    description: str = ""
    models: tuple[Model, ...] = ()
    relationships: tuple[Relationship, ...] = ()
    views: tuple[View, ...] = ()
    cubes: tuple[Cube, ...] = ()
    fingerprint: str = ""
    warnings: tuple[str, ...] = ()
    path: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)
    # Per model, a hash of its JSON when it was read without a warning ("" otherwise): what
    # a warm process reuses the model's parse, items and description by (see parse_manifest).
    model_keys: tuple[str, ...] = field(default=(), compare=False, repr=False)
    # What the schema was read from: "Wren MDL", "dbt manifest", "SQL DDL", "DuckDB
    # database" or "SQLite database" (wrenmem.schema.sources).
    source: str = "Wren MDL"

    @property
    def dialect(self) -> str | None:
        """sqlglot dialect of the manifest's ``dataSource``; None if absent or unknown."""
        return DATASOURCE_DIALECTS.get(self.data_source.strip().lower())

    @cached_property
    def _models_by_name(self) -> dict[str, Model]:
        return {m.name: m for m in self.models}

    def model(self, name: str) -> Model | None:
        return self._models_by_name.get(name)

    def table_columns(self, *, hidden: bool = True) -> dict[str, dict[str, str]]:
        """Model/view name → column name → type, hidden columns included (SQL may use them)
        unless ``hidden`` is False (what people and search see).

        View columns come from the output names of the view's statement; a ``*`` expands
        to the columns of the model it selects from, when that is known.
        """
        out: dict[str, dict[str, str]] = {
            m.name: {c.name: c.type for c in (m.columns if hidden else m.visible_columns())}
            for m in self.models}
        concealed = set() if hidden else (
            {c.name for m in self.models for c in m.columns if c.is_hidden}
            - {c.name for m in self.models for c in m.visible_columns()})
        for view in self.views:
            if view.name not in out:
                columns = _view_columns(view.statement, self.dialect, out)
                out[view.name] = {c: t for c, t in columns.items() if c not in concealed}
        return out


T = TypeVar("T")


def per_model(manifest: Manifest, make: Callable[[Model], T], memo: dict[str, T] | None
              ) -> list[T]:
    """``make(model)`` for each model, taken from ``memo`` (an earlier call's results by
    model key, see :func:`parse_manifest`) where the key is there: the same JSON makes the
    same result. Afterwards ``memo`` holds exactly this manifest's keyed models."""
    if memo is None or len(manifest.model_keys) != len(manifest.models):
        return [make(m) for m in manifest.models]
    known = dict(memo)
    memo.clear()
    out = []
    for model, key in zip(manifest.models, manifest.model_keys, strict=True):
        made = known.get(key) if key else None
        if made is None:
            made = make(model)
        if key:
            memo[key] = made
        out.append(made)
    return out


# Where a manifest comes from and how to name another, for "not found" (CLI, API and MCP).
MANIFEST_HINT = ("a Wren MDL manifest, as Wren's `wren` CLI builds it into target/mdl.json, "
                 "or a dbt target/manifest.json, a SQL DDL file, a DuckDB or SQLite database; "
                 "name another with --manifest PATH or the `manifest` setting "
                 "(WRENMEM_MANIFEST, or manifest = \"...\" in wrenmem.toml)")


def read_manifest_bytes(path: Path, max_bytes: int = MAX_MANIFEST_BYTES) -> bytes:
    """The manifest file's bytes; raises :class:`ManifestError` naming the file when it is
    missing, not a regular file, or larger than ``max_bytes`` (checked before reading).

    A DuckDB or SQLite database file is not read whole: it is opened read-only and its
    schema is what comes back, as the JSON of a Wren MDL (``max_bytes`` holds that JSON)."""
    from wrenmem.schema import sources

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
                  reuse: Mapping[str, Model] | None = None,
                  canonical: dict[str, str] | None = None) -> Manifest:
    """Read a manifest file (or its ``data``, already read), of at most ``max_bytes`` (the
    ``max_manifest_bytes`` setting). Raises :class:`ManifestError` naming the file and the
    problem. ``reuse``: models of an earlier read by their key (see :func:`parse_manifest`).
    ``canonical``: the canonical JSON of models by their text in the file (see
    :mod:`wrenmem.schema.rawjson`), used and replaced by this read's (a warm process)."""
    path = Path(path)
    if data is None:
        data = read_manifest_bytes(path, max_bytes)
    else:
        from wrenmem.schema import sources

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
        from wrenmem.schema.sources.ddl import ddl_document

        return parse_manifest(ddl_document(text, str(path)), str(path))
    try:
        # Keys starting with "_" are dropped while decoding: they are not part of the schema
        # and the fingerprint ignores them, so it need not copy the document again.
        hooked = '"_' in text or _ESCAPED_SURROGATE.search(text) is not None  # 20x the regex
        # no "_key": and no escaped surrogate: the C decoder alone, 3x faster
        decoder = json.JSONDecoder(object_pairs_hook=_public_object if hooked else None,
                                   parse_int=_parse_int)
        decoded = rawjson.decode_with_models(
            text, decoder, _public_object if hooked else None) if canonical is not None \
            else None
        if decoded is None:
            document, spans = decoder.decode(text), None
        else:
            document, spans = decoded
    except json.JSONDecodeError as e:
        raise ManifestError(f"{path}:{e.lineno}:{e.colno}: manifest is not valid JSON: "
                            f"{e.msg}") from e
    except RecursionError as e:
        raise ManifestError(f"{path}: manifest is nested too deeply") from e
    if isinstance(document, list):  # the hook cleaned every object, not a top-level list
        document = _clean_value(document)
    from wrenmem.schema.sources import is_dbt_manifest

    if is_dbt_manifest(document):
        from wrenmem.schema.sources.dbt import dbt_document

        return parse_manifest(dbt_document(document, str(path)), str(path), _public=True)
    texts = None
    if canonical is not None and spans is not None:
        texts = _model_texts(document["models"], spans, hooked, canonical)
    return parse_manifest(document, str(path), _public=True, reuse=reuse, _model_texts=texts)


def _database_json(path: Path, kind: str, max_bytes: int, data: bytes | None = None) -> bytes:
    """The schema of the database at ``path`` (or of its bytes ``data``, copied to a
    temporary file first) as MDL JSON of at most ``max_bytes``."""
    from wrenmem.schema.sources.database import database_document

    if data is None:
        document = database_document(path, kind)
    else:
        import tempfile

        with tempfile.TemporaryDirectory(prefix="wrenmem-db-") as folder:
            copy = Path(folder) / path.name
            copy.write_bytes(data)
            document = database_document(copy, kind)
    out = json.dumps(document, ensure_ascii=False, sort_keys=True).encode("utf-8")
    if len(out) > max_bytes:
        raise ManifestError(manifest_too_large(path, len(out), max_bytes)
                            .replace("manifest too large", "the database's schema is too large"))
    return out


def _model_texts(models: list[Any], spans: list[str], hooked: bool,
                 canonical: dict[str, str]) -> list[str]:
    """The canonical JSON of each model: remembered by its text in the file, else made;
    ``canonical`` is left holding this manifest's models only."""
    keys = [rawjson.span_key(span, hooked) for span in spans]
    texts = [canonical.get(k) or _canonical(m) for k, m in zip(keys, models, strict=True)]
    canonical.clear()
    canonical.update(zip(keys, texts, strict=True))
    return texts


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


def parse_manifest(document: Any, path: str = "<manifest>", *, _public: bool = False,
                   reuse: Mapping[str, Model] | None = None,
                   _model_texts: list[str] | None = None) -> Manifest:
    """Build a :class:`Manifest` from decoded JSON, skipping (and naming) bad items.

    Each model read without a warning gets a key, a hash of its JSON (``model_keys``); a
    model whose key is in ``reuse`` (an earlier read's models by key) is not parsed again:
    the same JSON makes the same model. The keys cost nothing extra: the fingerprint's
    canonical JSON is made of the same pieces.
    """
    if not isinstance(document, dict):
        raise ManifestError(f"{path}: a manifest must be a JSON object, not {_kind(document)}")
    public = document if _public else _without_private(document)
    warnings: list[str] = []
    sections: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for section in SECTIONS:
        value = public.get(section)
        if value is None:
            sections[section] = []
            continue
        if not isinstance(value, list):
            raise ManifestError(f"{path}: '{section}' must be a list, not {_kind(value)}")
        sections[section] = _named_items(value, section, warnings)
    digest, pieces = _fingerprint_pieces(public, _model_texts)
    models_list: list[Model] = []
    keys: list[str] = []
    for where, item in sections["models"]:
        key = hashlib.blake2b(pieces[where].encode("utf-8", "surrogatepass"),
                              digest_size=16).hexdigest() if where in pieces else ""
        model = reuse.get(key) if reuse is not None and key else None
        if model is None:
            before = len(warnings)
            model = _model(where, item, warnings)
            if len(warnings) != before:
                key = ""  # its warnings name its place: read it again next time
        models_list.append(model)
        keys.append(key)
    models = tuple(models_list)
    model_names = {m.name for m in models}
    relationships = tuple(r for where, item in sections["relationships"]
                          if (r := _relationship(where, item, model_names, warnings)))
    views = tuple(View(item["name"], _text(item, "statement", where, warnings),
                       _description(item, where, warnings))
                  for where, item in sections["views"])
    cubes = tuple(_cube(where, item, warnings) for where, item in sections["cubes"])
    source, source_warnings = _source(public)
    return Manifest(
        source=source,
        catalog=_text(document, "catalog", "manifest", warnings),
        schema=_text(document, "schema", "manifest", warnings),
        data_source=_text(document, "dataSource", "manifest", warnings),
        description=_text(document, "description", "manifest", warnings),
        models=models, relationships=relationships, views=views, cubes=cubes,
        fingerprint=digest, warnings=(*source_warnings, *warnings), path=path,
        model_keys=tuple(keys),
    )


def _source(document: Mapping[str, Any]) -> tuple[str, tuple[str, ...]]:
    """What a converted document was read from (``schemaSource``) and its reader's
    warnings; a Wren MDL has none."""
    block = document.get("schemaSource")
    if not isinstance(block, dict) or not isinstance(block.get("kind"), str):
        return "Wren MDL", ()
    found = block.get("warnings")
    return block["kind"], tuple(str(w) for w in found) if isinstance(found, list) else ()


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      default=str)


def fingerprint(document: Any, *, _public: bool = False) -> str:
    """Stable hash of a decoded manifest; keys starting with ``_`` (at any depth) are ignored."""
    public = document if _public else _without_private(document)
    return _digest(_canonical(public))


def _digest(payload: str) -> str:
    return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _fingerprint_pieces(document: dict[str, Any], model_texts: list[str] | None = None
                        ) -> tuple[str, dict[str, str]]:
    """:func:`fingerprint` of a public document, and the canonical JSON of each model by its
    ``where`` (``models[3] 'orders'``): the document's canonical JSON is assembled from them
    (the same text ``json.dumps`` makes: keys sorted, a list's items joined by commas).
    ``model_texts``: that of each model, already made (:func:`_model_texts`)."""
    models = document.get("models")
    if not isinstance(models, list):
        return _digest(_canonical(document)), {}
    if model_texts is not None and len(model_texts) == len(models):
        texts = model_texts
    else:
        texts = [_canonical(m) for m in models]
    parts = []
    for key in sorted(document):
        value = "[" + ",".join(texts) + "]" if key == "models" else _canonical(document[key])
        parts.append(f"{_canonical(key)}:{value}")
    pieces = {}
    for i, (model, text) in enumerate(zip(models, texts, strict=True)):
        name = model.get("name") if isinstance(model, dict) else None
        if isinstance(name, str) and name.strip():
            pieces[f"models[{i}] '{name.strip()}'"] = text
    return _digest("{" + ",".join(parts) + "}"), pieces


def _without_private(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _without_private(v) for k, v in value.items()
                if not str(k).startswith("_")}
    if isinstance(value, list):
        return [_without_private(v) for v in value]
    return value


def _kind(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
             int: "a number", float: "a number", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _named_items(items: list[Any], section: str, warnings: list[str]
                 ) -> list[tuple[str, dict[str, Any]]]:
    """Items that are objects with a unique non-empty string name, as (where, item)."""
    out: list[tuple[str, dict[str, Any]]] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        where = f"{section}[{i}]"
        if not isinstance(item, dict):
            warnings.append(f"{where}: skipped, expected an object, got {_kind(item)}")
            continue
        name = item.get("name")
        if not isinstance(name, str) or not name.strip():
            got = "no name" if name is None or name == "" else f"name {_kind(name)}"
            warnings.append(f"{where}: skipped, it has {got} (a non-empty string is needed)")
            continue
        name = name.strip()
        where = f"{where} '{name}'"
        if name in seen:
            warnings.append(f"{where}: skipped, the name is used twice in '{section}'")
            continue
        seen.add(name)
        out.append((where, {**item, "name": name}))
    return out


def _text(obj: Mapping[str, Any], key: str, where: str, warnings: list[str]) -> str:
    """A string field; numbers are stringified, other types dropped with a warning."""
    value = obj.get(key)
    if value is None:
        return ""
    if isinstance(value, str):
        return _cut(value.strip(), where, key, warnings)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _cut(str(value), where, key, warnings)
    warnings.append(f"{where}: '{key}' ignored, expected a string, got {_kind(value)}")
    return ""


def _cut(text: str, where: str, key: str, warnings: list[str]) -> str:
    """``text`` held to :data:`MAX_ITEM_CHARS`, the cut marked in it and warned about."""
    if len(text) <= MAX_ITEM_CHARS:
        return text
    warnings.append(f"{where}: '{key}' cut to {MAX_ITEM_CHARS:,} of its {len(text):,} "
                    "characters")
    return f"{text[:MAX_ITEM_CHARS]} … [cut: {len(text):,} characters, {MAX_ITEM_CHARS:,} kept]"


def _flag(obj: Mapping[str, Any], key: str, where: str, warnings: list[str]) -> bool:
    value = obj.get(key)
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    warnings.append(f"{where}: '{key}' ignored, expected true or false, got {_kind(value)}")
    return False


def _properties(obj: Mapping[str, Any], where: str, warnings: list[str]) -> dict[str, Any]:
    props = obj.get("properties")
    if props is None:
        return {}
    if not isinstance(props, dict):
        warnings.append(f"{where}: 'properties' ignored, expected an object, got {_kind(props)}")
        return {}
    return props


def _prop(props: Mapping[str, Any], keys: tuple[str, ...], where: str,
          warnings: list[str]) -> str:
    """First of ``keys`` (camelCase first, then snake_case) holding a non-empty value."""
    for key in keys:
        text = _text(props, key, where, warnings)
        if text:
            return text
    return ""


def _description(obj: Mapping[str, Any], where: str, warnings: list[str]) -> str:
    props = _properties(obj, where, warnings)
    return (_prop(props, ("description",), where + ".properties", warnings)
            or _text(obj, "description", where, warnings))


def _string_list(value: Any, where: str, key: str, warnings: list[str]) -> tuple[str, ...]:
    """A list of strings, or a comma-separated string, with empty parts dropped."""
    if value is None:
        return ()
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, list):
        parts = [str(v) for v in value if v is not None and not isinstance(v, (dict, list))]
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        parts = [str(value)]
    else:
        warnings.append(f"{where}: '{key}' ignored, expected a list, got {_kind(value)}")
        return ()
    return tuple(dict.fromkeys(p.strip() for p in parts if p.strip()))


def _model(where: str, item: dict[str, Any], warnings: list[str]) -> Model:
    props = _properties(item, where, warnings)
    pk_raw = item.get("primaryKey")
    primary_key = _string_list(pk_raw, where, "primaryKey", warnings)
    columns: list[Column] = []
    raw_columns = item.get("columns")
    if raw_columns is not None and not isinstance(raw_columns, list):
        warnings.append(f"{where}: 'columns' ignored, expected a list, got {_kind(raw_columns)}")
        raw_columns = None
    for cwhere, col in _named_items(raw_columns or [], f"{where}.columns", warnings):
        columns.append(_column(cwhere, col, primary_key, warnings))
    return Model(
        name=item["name"], columns=tuple(columns), primary_key=primary_key,
        description=_description(item, where, warnings),
        layer=_prop(props, ("dbtLayer", "dbt_layer"), where, warnings).lower(),
        data_scope=_prop(props, ("dataScope", "data_scope"), where, warnings),
    )


def _column(where: str, col: dict[str, Any], primary_key: tuple[str, ...],
            warnings: list[str]) -> Column:
    props = _properties(col, where, warnings)
    accepted_raw = next((props[k] for k in ("acceptedValues", "accepted_values")
                         if props.get(k) not in (None, "")), None)
    name = col["name"]
    return Column(
        name=name,
        type=_text(col, "type", where, warnings),
        description=_description(col, where, warnings),
        is_calculated=_flag(col, "isCalculated", where, warnings),
        expression=_text(col, "expression", where, warnings),
        relationship=_text(col, "relationship", where, warnings),
        not_null=_flag(col, "notNull", where, warnings),
        is_primary_key=_flag(col, "isPrimaryKey", where, warnings) or name in primary_key,
        is_hidden=_flag(col, "isHidden", where, warnings),
        accepted_values=_string_list(accepted_raw, where, "accepted_values", warnings),
        derived_from=_prop(props, ("derivedFrom", "derived_from"), where, warnings),
        dbt_tests=_string_list(next((props[k] for k in ("dbtTests", "dbt_tests")
                                     if props.get(k) not in (None, "")), None),
                               where, "dbt_tests", warnings),
        dbt_test_status=_prop(props, ("dbtTestStatus", "dbt_test_status"), where, warnings),
    )


def _relationship(where: str, item: dict[str, Any], model_names: set[str],
                  warnings: list[str]) -> Relationship | None:
    models = item.get("models")
    if (not isinstance(models, list) or len(models) != 2
            or not all(isinstance(m, str) and m.strip() for m in models)):
        warnings.append(f"{where}: skipped, 'models' must be a list of two model names, "
                        f"got {json.dumps(models, default=str)[:80]}")
        return None
    left, right = (m.strip() for m in models)
    for end in (left, right):
        if end not in model_names:
            warnings.append(f"{where}: refers to model '{end}', which is not in the manifest")
    join_type = _text(item, "joinType", where, warnings).upper()
    if join_type and join_type not in JOIN_TYPES:
        warnings.append(f"{where}: unknown joinType '{join_type}'")
    return Relationship(item["name"], left, right, join_type,
                        " ".join(_text(item, "condition", where, warnings).split()),
                        _description(item, where, warnings))


def _cube(where: str, item: dict[str, Any], warnings: list[str]) -> Cube:
    def fields_of(key: str) -> tuple[CubeField, ...]:
        raw = item.get(key)
        if raw is not None and not isinstance(raw, list):
            warnings.append(f"{where}: '{key}' ignored, expected a list, got {_kind(raw)}")
            raw = None
        return tuple(
            CubeField(f["name"], _text(f, "expression", fw, warnings),
                      _text(f, "type", fw, warnings), _description(f, fw, warnings),
                      _string_list(f.get("granularities"), fw, "granularities", warnings))
            for fw, f in _named_items(raw or [], f"{where}.{key}", warnings))

    hierarchies: list[tuple[str, tuple[str, ...]]] = []
    raw_h = item.get("hierarchies")
    if isinstance(raw_h, dict):
        for hname, levels in raw_h.items():
            names = _string_list(levels, f"{where}.hierarchies", str(hname), warnings)
            if names:
                hierarchies.append((str(hname), names))
    elif raw_h is not None:
        warnings.append(f"{where}: 'hierarchies' ignored, expected an object, got "
                        f"{_kind(raw_h)}")
    return Cube(item["name"], _text(item, "baseObject", where, warnings),
                _description(item, where, warnings), fields_of("measures"),
                fields_of("dimensions"), fields_of("timeDimensions"), tuple(hierarchies))


def _view_columns(statement: str, dialect: str | None,
                  known: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Output column names of a view's SELECT (types unknown: empty strings)."""
    if not statement.strip():
        return {}
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    from wrenmem.sql.bounds import parse_one

    try:
        tree = parse_one(statement, dialect)
    except (SqlglotError, ValueError, RecursionError):  # out of bounds: a ValueError
        return {}
    if not isinstance(tree, exp.Query):
        return {}
    out: dict[str, str] = {}
    for projection in tree.selects:
        if isinstance(projection, exp.Star) or (
                isinstance(projection, exp.Column) and isinstance(projection.this, exp.Star)):
            for table in tree.find_all(exp.Table):
                out.update({c: "" for c in known.get(table.name, {})})
            continue
        name = projection.alias_or_name
        if name:
            out[name] = ""
    return out
