"""Schema items: one searchable record per model, column, relationship, view, cube and cube field.

Each item has a stable id (``column:orders.amount``), a sentence for search (``text``),
structured fields for filtering, and ``detail``: the describe-style lines a reader sees when
the item is fetched. ``item_hash`` covers every field, so an index re-embeds an item only
when something about it changed. What is embedded is ``vector_text``: a column's sentence
without "in model M", so every regional copy of a column and every shared audit column has
the same one, embedded once (the keyword index still sees the model's name).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, fields, replace
from functools import cached_property
from typing import TYPE_CHECKING

from wrenmem.lazy import lazy
from wrenmem.schema.describe import (
    JOIN_WORDS,
    column_text,
    column_traits,
    cube_field_text,
    dbt_tests_text,
    relationship_lines,
    sentence,
    view_lines,
)

# The item format (ITEMS_VERSION, SchemaItem) is read by every no-op check of the schema
# index (wrenmem/index/noop.py); the manifest's records only when items are made.
if TYPE_CHECKING:
    from wrenmem.schema import manifest as schema_manifest
    from wrenmem.schema.manifest import Cube, CubeField, Manifest, Model
else:
    schema_manifest = lazy("wrenmem.schema.manifest")

ITEM_TYPES = ("model", "column", "relationship", "view", "cube", "measure", "dimension",
              "time_dimension")
# Other spellings users may type for --type.
TYPE_ALIASES = {"cube_dimension": "dimension", "timedimension": "time_dimension",
                "time-dimension": "time_dimension", "models": "model", "columns": "column",
                "relationships": "relationship", "views": "view", "cubes": "cube",
                "measures": "measure", "dimensions": "dimension",
                "time_dimensions": "time_dimension", "table": "model", "tables": "model"}
MODEL_SUMMARY_COLUMNS = 40
# Bump when item texts or hashes are computed differently: a schema index state or a cache
# of another version is not trusted, so the next sync compares the table (re-embedding
# only changed texts) and the cache hashes every item again.
ITEMS_VERSION = 3
VIEW_SQL_CHARS = 300


@dataclass(frozen=True)
class SchemaItem:
    """One record of the schema index."""

    id: str
    type: str
    name: str
    model: str  # the model (or view, or cube base object) the item belongs to
    text: str  # natural-language sentence that is embedded and keyword-searched
    detail: str  # what fetch shows for the item
    related: str = ""  # relationship: the other model; cube fields: the cube
    data_type: str = ""
    expression: str = ""
    description: str = ""
    is_calculated: bool = False

    @cached_property
    def item_hash(self) -> str:
        """Hash of every field: the index re-embeds an item only when this changes."""
        # Fields joined by a separator no name or description contains (unit separator).
        payload = "\x1f".join([str(getattr(self, name)) for name in _FIELD_NAMES])
        return hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()[:32]

    @cached_property
    def vector_text(self) -> str:
        """The sentence that is embedded: ``text``, for a column without its model's name."""
        if self.type == "column":
            return self.text.replace(f" in model {self.model}", "", 1)
        return self.text

    def to_dict(self) -> dict[str, object]:
        return {"id": self.id, "type": self.type, "name": self.name, "model": self.model,
                "related": self.related, "data_type": self.data_type,
                "expression": self.expression, "description": self.description,
                "is_calculated": self.is_calculated, "text": self.text, "detail": self.detail}


_FIELD_NAMES = tuple(f.name for f in fields(SchemaItem))


def normalize_types(types: tuple[str, ...] | list[str] | None) -> tuple[str, ...]:
    """Canonical item types; raises ValueError naming an unknown one."""
    out: list[str] = []
    for raw in types or ():
        for part in str(raw).split(","):
            name = part.strip().lower()
            if not name:
                continue
            name = TYPE_ALIASES.get(name, name)
            if name not in ITEM_TYPES:
                raise ValueError(f"unknown item type {part.strip()!r}; expected one of "
                                 f"{', '.join(ITEM_TYPES)}")
            if name not in out:
                out.append(name)
    return tuple(out)


def schema_items(manifest: Manifest, memo: dict[str, list[SchemaItem]] | None = None
                 ) -> list[SchemaItem]:
    """Every item of ``manifest``, in manifest order; hidden columns are left out.

    ``memo``: the items of each model by its key (``Manifest.model_keys``) from an earlier
    call; a model found there is not turned into items again (the same JSON makes the same
    items), and afterwards the memo holds exactly this manifest's models.
    """
    made = schema_manifest.per_model(manifest, model_items, memo)
    items = [item for model in made for item in model]
    return _unique_ids(items + _other_items(manifest))


def model_items(model: Model) -> list[SchemaItem]:
    """The model's own item, then one per visible column."""
    items = [_model_item(model)]
    for column in model.visible_columns():
        facts = column_traits(column)
        text = f"Column {column.name} ({', '.join(facts)}) in model {model.name}"
        extra = []
        if column.description:
            extra.append(sentence(column.description))
        if column.accepted_values:
            extra.append("Accepted values: " + ", ".join(column.accepted_values) + ".")
        if column.dbt_tests:
            extra.append(dbt_tests_text(column))
        text = text + (": " + " ".join(extra) if extra else ".")
        items.append(SchemaItem(
            f"column:{model.name}.{column.name}", "column", column.name, model.name, text,
            f"Column {model.name}.{column_text(column)}", related=column.type
            if column.relationship else "", data_type=column.type,
            expression=column.expression, description=column.description,
            is_calculated=column.is_calculated))
    return items


def _other_items(manifest: Manifest) -> list[SchemaItem]:
    """The relationships', views' and cubes' items."""
    items: list[SchemaItem] = []
    for rel in manifest.relationships:
        kind = JOIN_WORDS.get(rel.join_type, rel.join_type.lower().replace("_", " "))
        text = (f"Relationship {rel.name} joins model {rel.left} to model {rel.right}"
                + (f" ({kind})" if kind else "")
                + (f" on {rel.condition}." if rel.condition else ".")
                + (" " + sentence(rel.description) if rel.description else ""))
        items.append(SchemaItem(f"relationship:{rel.name}", "relationship", rel.name, rel.left,
                                text, "Relationship " + rel.name + ": "
                                + " ".join(relationship_lines(rel)[1:]), related=rel.right,
                                expression=rel.condition, description=rel.description))
    columns_by_view = manifest.table_columns(hidden=False) if manifest.views else {}
    for view in manifest.views:
        names = [c for c in columns_by_view.get(view.name, {}) if c]
        statement = " ".join(view.statement.split())
        if len(statement) > VIEW_SQL_CHARS:
            statement = statement[:VIEW_SQL_CHARS].rstrip() + " …"
        parts = [f"View {view.name}" + (": " + sentence(view.description)
                                        if view.description else ".")]
        if names:
            parts.append("Columns: " + ", ".join(names) + ".")
        if statement:
            parts.append("SQL: " + statement)
        body = view_lines(view)[1:]
        if view.description:  # "View v: description." on one line, then the SQL
            body = [f"View {view.name}: {body[0]}", *body[1:]]
        else:
            body = [f"View {view.name}.", *body]
        items.append(SchemaItem(f"view:{view.name}", "view", view.name, view.name,
                                " ".join(parts), "\n".join(body),
                                expression=view.statement, description=view.description))
    for cube in manifest.cubes:
        items += _cube_items(cube)
    return items


def _unique_ids(items: list[SchemaItem]) -> list[SchemaItem]:
    """Names may contain dots (model ``a.b`` column ``c`` vs model ``a`` column ``b.c``):
    a repeated id gets a ``#2`` suffix, in manifest order, so ids stay unique and stable."""
    if len({item.id for item in items}) == len(items):
        return items
    seen: dict[str, int] = {}
    out = []
    for item in items:
        n = seen.get(item.id, 0) + 1
        seen[item.id] = n
        out.append(item if n == 1 else replace(item, id=f"{item.id}#{n}"))
    return out


def _model_item(model: Model) -> SchemaItem:
    columns = [c.name for c in model.visible_columns()]
    shown = columns[:MODEL_SUMMARY_COLUMNS]
    more = len(columns) - len(shown)
    listing = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
    head = f"Model {model.name}" + (f" ({model.layer} layer)" if model.layer else "")
    text = head + (": " + sentence(model.description) if model.description else ".")
    if listing:
        text += f" Columns: {listing}."
    if model.primary_key:
        text += f" Primary key: {', '.join(model.primary_key)}."
    if model.data_scope:
        text += f" Data scope: {sentence(model.data_scope)}"
    detail = [head + (": " + sentence(model.description) if model.description else ".")]
    if model.primary_key:
        detail.append(f"Primary key: {', '.join(model.primary_key)}.")
    if model.data_scope:
        detail.append(f"Data scope: {sentence(model.data_scope)}")
    if listing:
        detail.append(f"Columns: {listing}.")
    return SchemaItem(f"model:{model.name}", "model", model.name, model.name, text,
                      "\n".join(detail), description=model.description)


def _cube_items(cube: Cube) -> list[SchemaItem]:
    groups: tuple[tuple[str, str, tuple[CubeField, ...]], ...] = (
        ("measure", "Measures", cube.measures), ("dimension", "Dimensions", cube.dimensions),
        ("time_dimension", "Time dimensions", cube.time_dimensions))
    over = f" over {cube.base_object}" if cube.base_object else ""
    text = f"Cube {cube.name}{over}" + (": " + sentence(cube.description)
                                         if cube.description else ".")
    for _kind, title, members in groups:
        if members:
            text += f" {title}: " + ", ".join(f.name for f in members) + "."
    items = [SchemaItem(f"cube:{cube.name}", "cube", cube.name, cube.base_object, text, text,
                        related=cube.name, description=cube.description)]
    for kind, _title, members in groups:
        label = kind.replace("_", " ").capitalize()
        for f in members:
            facts = f" ({f.type})" if f.type else ""
            if f.expression and (kind == "measure" or f.expression != f.name):
                facts += f", computed as {f.expression}"
            details = [sentence(f.description)] if f.description else []
            if f.granularities:
                details.append(f"Granularities: {', '.join(f.granularities)}.")
            tail = ": " + " ".join(details) if details else "."
            text = f"{label} {f.name} of cube {cube.name}{over}{facts}{tail}"
            detail = f"{label} {cube.name}.{cube_field_text(f, show_same_expression=False)}"
            items.append(SchemaItem(
                f"{kind}:{cube.name}.{f.name}", kind, f.name, cube.base_object, text, detail,
                related=cube.name, data_type=f.type, expression=f.expression,
                description=f.description, is_calculated=kind == "measure"))
    return items
