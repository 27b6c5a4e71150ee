"""The Wren MDL manifest's records: models with columns, relationships, views and cubes,
small and frozen, as :mod:`wrenmem.schema.manifest` reads them (and re-exports them)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, TypeVar

from wrenmem.lazy import lazy

if TYPE_CHECKING:
    from wrenmem.sql import bounds
else:
    bounds = lazy("wrenmem.sql.bounds")  # (and sqlglot: only for a view's columns)

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


def _view_columns(statement: str, dialect: str | None,
                  known: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """Output column names of a view's SELECT (types unknown: empty strings)."""
    if not statement.strip():
        return {}
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    try:
        tree = bounds.parse_one(statement, dialect)
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
