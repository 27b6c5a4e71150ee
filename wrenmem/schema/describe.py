"""The whole schema as plain text for a language model: models, relationships, views, cubes.

The text is deterministic (manifest order, no timestamps), uses full sentences with one
final period each, and leaves hidden columns out. ``fetch`` returns it whole when it is
short enough.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from wrenmem.lazy import lazy

if TYPE_CHECKING:
    from wrenmem.schema import manifest as schema_manifest
    from wrenmem.schema.manifest import Column, Cube, CubeField, Manifest, Model, Relationship, View
else:  # the records are the manifest's: its parser is loaded by whoever reads one
    schema_manifest = lazy("wrenmem.schema.manifest")

JOIN_WORDS = {
    "ONE_TO_ONE": "one to one",
    "ONE_TO_MANY": "one to many",
    "MANY_TO_ONE": "many to one",
    "MANY_TO_MANY": "many to many",
}


# How the header names a schema source other than a Wren MDL (wrenmem.schema.sources).
READ_FROM = {"dbt manifest": "a dbt manifest", "SQL DDL": "SQL DDL",
             "DuckDB database": "a DuckDB database", "SQLite database": "a SQLite database"}


def sentence(text: str) -> str:
    """``text`` with inner whitespace collapsed and exactly one closing punctuation mark."""
    text = " ".join(text.split())
    if not text:
        return ""
    return text if text[-1] in ".!?。！？" else text + "."


def literal(value: str) -> str:
    """A value as a SQL string literal, so commas inside values stay unambiguous."""
    return "'" + value.replace("'", "''") + "'"


def describe(manifest: Manifest, memo: dict[str, list[str]] | None = None) -> str:
    """The schema of ``manifest`` as structured plain text (ends with a newline).

    ``memo``: each model's lines by its key (``Manifest.model_keys``) from an earlier call,
    reused where the key is the same; afterwards it holds exactly this manifest's models.
    """
    lines: list[str] = header(manifest)
    if manifest.description:
        lines.append(sentence(manifest.description))
    sections: list[tuple[str, list[list[str]]]] = [
        ("Models", schema_manifest.per_model(manifest, model_lines, memo)),
        ("Relationships", [relationship_lines(r) for r in manifest.relationships]),
        ("Views", [view_lines(v) for v in manifest.views]),
        ("Cubes", [cube_lines(c) for c in manifest.cubes]),
    ]
    for title, blocks in sections:
        if not blocks:
            continue
        lines += ["", f"## {title}"]
        for block in blocks:
            lines += ["", *block]
    return "\n".join(lines) + "\n"


def header(manifest: Manifest) -> list[str]:
    """Title line, then data source and counts in one sentence."""
    where = ".".join(p for p in (manifest.catalog, manifest.schema) if p)
    facts = []
    if manifest.source in READ_FROM:  # a Wren MDL says nothing: its text is as it was
        facts.append(f"read from {READ_FROM[manifest.source]}")
    if manifest.data_source:
        dialect = manifest.dialect
        facts.append(f"data source {manifest.data_source}"
                     + (f" (SQL dialect {dialect})" if dialect else ""))
    counts = [c for c in (_count(len(manifest.models), "model"),
                          _count(len(manifest.relationships), "relationship"),
                          _count(len(manifest.views), "view"),
                          _count(len(manifest.cubes), "cube")) if c]
    facts.append(", ".join(counts) if counts else "no models")
    summary = "; ".join(facts)
    return [f"# Schema {where}" if where else "# Schema",
            sentence(summary[:1].upper() + summary[1:])]


def _count(n: int, word: str) -> str:
    return "" if n == 0 else f"{n} {word}" + ("" if n == 1 else "s")


def model_lines(model: Model) -> list[str]:
    title = f"### Model {model.name}"
    if model.layer:
        title += f" ({model.layer} layer)"
    lines = [title]
    if model.description:
        lines.append(sentence(model.description))
    if model.primary_key:
        label = "Primary key" if len(model.primary_key) == 1 else "Composite primary key"
        lines.append(f"{label}: {', '.join(model.primary_key)}.")
    if model.data_scope:
        lines.append(f"Data scope: {sentence(model.data_scope)}")
    columns = model.visible_columns()
    if columns:
        lines.append("Columns:")
        lines += [f"- {column_text(c)}" for c in columns]
    else:
        lines.append("No columns are declared.")
    return lines


def column_traits(column: Column) -> list[str]:
    """Short facts about a column, in a fixed order: type, keys, constraints, calculation."""
    if column.relationship:
        # A relationship column's type is the model it leads to.
        target = f" to {column.type}" if column.type else ""
        traits = [f"relationship {column.relationship}{target}"]
    else:
        traits = [column.type or "type unknown"]
    if column.is_primary_key:
        traits.append("primary key")
    if column.not_null:
        traits.append("not null")
    if column.is_calculated and column.expression:
        traits.append(f"calculated as {column.expression}")
    elif column.is_calculated:
        traits.append("calculated")
    return traits


def column_text(column: Column) -> str:
    text = f"{column.name} ({'; '.join(column_traits(column))})"
    details = [sentence(column.description)] if column.description else []
    if column.accepted_values:
        details.append("Accepted values: "
                       + ", ".join(literal(v) for v in column.accepted_values) + ".")
    if column.derived_from:
        details.append(f"Derived from {sentence(column.derived_from)}")
    if column.dbt_tests:
        details.append(dbt_tests_text(column))
    return text + (": " + " ".join(details) if details else ".")


def dbt_tests_text(column: Column) -> str:
    """``dbt tests: unique, not_null (status: pass).``"""
    status = f" (status: {column.dbt_test_status})" if column.dbt_test_status else ""
    return f"dbt tests: {', '.join(column.dbt_tests)}{status}."


def relationship_lines(rel: Relationship) -> list[str]:
    kind = JOIN_WORDS.get(rel.join_type, rel.join_type.lower().replace("_", " "))
    joins = f"Joins {rel.left} to {rel.right}" + (f" ({kind})" if kind else "")
    lines = [f"### Relationship {rel.name}"]
    if rel.description:
        lines.append(sentence(rel.description))
    lines.append(f"{joins} on {rel.condition}." if rel.condition
                 else f"{joins}; no join condition is declared.")
    return lines


def view_lines(view: View) -> list[str]:
    lines = [f"### View {view.name}"]
    if view.description:
        lines.append(sentence(view.description))
    statement = [line.rstrip() for line in view.statement.strip().splitlines() if line.strip()]
    if statement:
        lines.append("SQL:")
        lines += ["    " + line for line in statement]
    else:
        lines.append("No SQL statement is declared.")
    return lines


def cube_field_text(item: CubeField, *, show_same_expression: bool = True) -> str:
    text = item.name + (f" ({item.type})" if item.type else "")
    if item.expression and (show_same_expression or item.expression != item.name):
        text += f" = {item.expression}"
    details = [sentence(item.description)] if item.description else []
    if item.granularities:
        details.append(f"Granularities: {', '.join(item.granularities)}.")
    return text + (": " + " ".join(details) if details else ".")


def cube_lines(cube: Cube) -> list[str]:
    lines = [f"### Cube {cube.name}" + (f" over {cube.base_object}" if cube.base_object else "")]
    if cube.description:
        lines.append(sentence(cube.description))
    for title, items, same in (("Measures", cube.measures, True),
                               ("Dimensions", cube.dimensions, False),
                               ("Time dimensions", cube.time_dimensions, False)):
        if items:
            lines.append(f"{title}:")
            lines += [f"- {cube_field_text(i, show_same_expression=same)}" for i in items]
    if cube.hierarchies:
        lines.append("Hierarchies:")
        lines += [f"- {name}: {' > '.join(levels)}." for name, levels in cube.hierarchies]
    return lines
