"""Seed queries: canonical example pairs derived from the manifest, for a cold start
(docs/schema.md#seed). SQL is built as a sqlglot tree rendered in the manifest's dialect,
so identifiers are quoted only where needed; every seed is checked to parse."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from wrenmem.schema.manifest import Column, Manifest, Model, Relationship
from wrenmem.sql.bounds import parse_one
from wrenmem.sql.check import check_sql

if TYPE_CHECKING:
    from sqlglot import exp

log = logging.getLogger(__name__)
LIMIT = 100
NUMERIC_TYPES = frozenset("""int integer int2 int4 int8 int16 int32 int64 bigint smallint
    tinyint mediumint hugeint decimal numeric number double float float4 float8 float32
    float64 real money smallmoney bignumeric bigdecimal uint8 uint16 uint32 uint64 ubigint
    uinteger usmallint utinyint""".split())
TEXT_TYPES = frozenset("""varchar char character text string nvarchar nchar bpchar enum
    citext varchar2 nvarchar2 lowcardinality""".split())
# Numeric columns whose sum means nothing.
NOT_MEASURES = re.compile(r"(^|_)(year|month|day|week|hour|zip|zipcode|postcode|postal_code|"
                          r"phone|fax|lat|latitude|lon|lng|longitude|version|rank|code|key|"
                          r"number|no|num|seq|sequence|index|idx|age|ordinal|position)$")
CATEGORY_HINTS = re.compile(r"(^|_)(status|state|type|kind|category|segment|channel|"
                            r"method|country|region|city|tier|level|group|class|gender|sex|"
                            r"currency|source|stage|plan|department|brand|color|colour)$")
# Words most SQL dialects reserve; a column called ``order`` must be quoted everywhere.
RESERVED = frozenset("""all alter and any as asc between by case cast check column constraint
    create cross current current_date current_time current_timestamp current_user date day
    default delete desc distinct drop else end escape except exists false fetch filter first
    for foreign from full grant group having hour in index inner insert intersect interval
    into is join key last left like limit minute month natural next not null of offset on
    only or order outer over partition position primary range references right row rows
    second select session set some table then time timestamp to true union unique update
    user using value values when where window with year""".split())


@dataclass(frozen=True)
class Seed:
    """A generated NL→SQL pair. ``key`` is stable across regenerations of the same item."""

    key: str
    nl: str
    sql: str
    kind: str  # list, sum, grouped_sum, filter, join
    model: str


def generate_seeds(manifest: Manifest) -> list[Seed]:
    """Every seed of ``manifest`` whose SQL parses in the manifest's dialect."""

    layers = {m.name: m.layer for m in manifest.models}
    conditions = parse_conditions(manifest)
    keys = relationship_keys(manifest, conditions)
    seeds: list[Seed] = []
    for model in manifest.models:
        if model.layer == "raw":
            continue
        seeds += _model_seeds(model, keys.get(model.name, set()), manifest.dialect)
    for view in manifest.views:
        seeds.append(Seed(f"view/{view.name}/list", f"List all {_words(view.name)}",
                          _select_all(view.name, manifest.dialect), "list", view.name))
    for rel in manifest.relationships:
        if "raw" in (layers.get(rel.left), layers.get(rel.right)):
            continue
        seed = _join_seed(rel, manifest, conditions.get(rel.name))
        if seed is not None:
            seeds.append(seed)
    out: list[Seed] = []
    seen_nl: set[str] = set()
    for seed in seeds:
        problems = check_sql(seed.sql, manifest.dialect)
        if problems:
            log.warning("seed %s skipped: %s", seed.key, problems[0].message)
            continue
        if seed.nl.casefold() in seen_nl:
            continue
        seen_nl.add(seed.nl.casefold())
        out.append(seed)
    return out


def parse_conditions(manifest: Manifest) -> dict[str, Any]:
    """Relationship name → parsed join condition (sqlglot tree), for those that parse."""
    from sqlglot import exp
    from sqlglot.errors import SqlglotError

    out: dict[str, Any] = {}
    for rel in manifest.relationships:
        if not rel.condition:
            continue
        # Wren writes conditions in its own ANSI SQL ("Order Items".buyer): read in MySQL or
        # BigQuery, a double-quoted name is a string literal, 'Order Items'.buyer, which
        # still parses. So read both ways and keep the reading that sees the most columns
        # (ANSI on a tie); a condition in backticks reads only in the manifest's dialect.
        readings = []
        error: Exception | None = None
        for read in dict.fromkeys((None, manifest.dialect)):
            try:
                readings.append(parse_one(rel.condition, read))
            except (SqlglotError, ValueError, RecursionError) as e:
                error = e
        if readings:
            out[rel.name] = max(readings, key=lambda t: len(list(t.find_all(exp.Column))))
        else:
            log.warning("relationship %s: condition does not parse: %s", rel.name, error)
    return out


def relationship_keys(manifest: Manifest, conditions: dict[str, Any] | None = None
                      ) -> dict[str, set[str]]:
    """Model name → lower-cased column names used in relationship join conditions."""
    from sqlglot import exp

    conditions = parse_conditions(manifest) if conditions is None else conditions
    out: dict[str, set[str]] = {}
    columns = {m.name: {c.name.lower() for c in m.columns} for m in manifest.models}
    for rel in manifest.relationships:
        tree = conditions.get(rel.name)
        if tree is None:
            continue
        ends = {rel.left.lower(): rel.left, rel.right.lower(): rel.right}
        found = list(tree.find_all(exp.Column))
        qualifiers = {c.table.lower() for c in found if c.table}
        # A condition written with aliases: map an unknown qualifier to the unmatched end.
        unknown = sorted(q for q in qualifiers if q not in ends)
        unmatched = [name for low, name in ends.items() if low not in qualifiers]
        alias = dict(zip(unknown, unmatched, strict=False)) if len(unknown) == len(
            unmatched) else {}
        for col in found:
            name = col.name.lower()
            if col.table:
                model = ends.get(col.table.lower()) or alias.get(col.table.lower())
                targets = [model] if model else []
            else:
                targets = [m for m in (rel.left, rel.right) if name in columns.get(m, set())]
            for model in targets:
                out.setdefault(model, set()).add(name)
    return out


def is_identifier(column: Column, model: Model, keys: set[str]) -> bool:
    """True for primary keys, join keys and id-like names: never to be summed."""
    low = column.name.lower()
    return (column.is_primary_key or low in {k.lower() for k in model.primary_key}
            or low in keys or low == "id" or low.endswith(("_id", "_key", "_fk", "_pk"))
            or bool(re.search(r"[a-z0-9](Id|ID|Key)$", column.name)))


def base_type(type_name: str) -> str:
    """``DECIMAL(10, 2)`` → ``decimal``; ``Nullable(Int64)`` → ``int64``."""
    low = type_name.strip().lower()
    for wrapper in ("nullable(", "lowcardinality("):
        if low.startswith(wrapper):
            low = low[len(wrapper):]
    return re.split(r"[(<\s]", low, maxsplit=1)[0]


def _usable(column: Column) -> bool:
    return not (column.is_hidden or column.is_calculated or column.relationship)


def pick_measure(model: Model, keys: set[str]) -> Column | None:
    """The first numeric column that is not an identifier and means something when summed."""
    for column in model.columns:
        if (_usable(column) and base_type(column.type) in NUMERIC_TYPES
                and not is_identifier(column, model, keys)
                and not NOT_MEASURES.search(column.name.lower())):
            return column
    return None


def pick_category(model: Model, keys: set[str]) -> Column | None:
    """A low-cardinality text column: one with accepted values, else a category-like name."""
    candidates = [c for c in model.columns
                  if _usable(c) and base_type(c.type) in TEXT_TYPES
                  and not is_identifier(c, model, keys)]
    for test in (lambda c: bool(c.accepted_values),
                 lambda c: bool(CATEGORY_HINTS.search(c.name.lower()))):
        found = next((c for c in candidates if test(c)), None)
        if found is not None:
            return found
    return None


def _model_seeds(model: Model, keys: set[str], dialect: str | None) -> list[Seed]:
    from sqlglot import exp

    words = _words(model.name)
    seeds = [Seed(f"model/{model.name}/list", f"List all {words}",
                  _select_all(model.name, dialect), "list", model.name)]
    measure = pick_measure(model, keys)
    category = pick_category(model, keys)
    if measure is not None:
        alias = f"total_{measure.name}".lower() if re.fullmatch(r"\w+", measure.name) \
            else "total"
        total = exp.alias_(exp.Sum(this=_col(measure.name, dialect)), _ident(alias, dialect))
        query = exp.select(total).from_(_table(model.name, dialect))
        seeds.append(Seed(f"model/{model.name}/sum/{measure.name}",
                          f"What is the total {_words(measure.name)} of all {words}?",
                          _sql(query, dialect), "sum", model.name))
        if category is not None:
            grouped = (exp.select(_col(category.name, dialect), total.copy())
                       .from_(_table(model.name, dialect))
                       .group_by(_col(category.name, dialect)))
            seeds.append(Seed(
                f"model/{model.name}/grouped_sum/{measure.name}/{category.name}",
                f"What is the total {_words(measure.name)} of {words} by "
                f"{_words(category.name)}?", _sql(grouped, dialect), "grouped_sum",
                model.name))
    for column in model.columns:
        if column.is_hidden or not column.accepted_values:
            continue
        value = column.accepted_values[0]
        query = (exp.select(exp.Star()).from_(_table(model.name, dialect))
                 .where(exp.EQ(this=_col(column.name, dialect), expression=exp.Literal.string(
                     value))).limit(LIMIT))
        seeds.append(Seed(f"model/{model.name}/filter/{column.name}",
                          f"Show {words} where {_words(column.name)} is {value}",
                          _sql(query, dialect), "filter", model.name))
    return seeds


def _join_seed(rel: Relationship, manifest: Manifest, parsed: Any) -> Seed | None:
    from sqlglot import exp

    dialect = manifest.dialect
    if parsed is None or manifest.model(rel.left) is None or manifest.model(
            rel.right) is None or rel.left == rel.right:
        return None
    condition = parsed.copy()
    for col in condition.find_all(exp.Column):
        for part in col.parts:
            _quote(part, dialect)
    query = (exp.select(exp.Star()).from_(_table(rel.left, dialect))
             .join(_table(rel.right, dialect), on=condition).limit(LIMIT))
    return Seed(f"relationship/{rel.name}/join",
                f"List {_words(rel.left)} with their {_words(rel.right)}",
                _sql(query, dialect), "join", rel.left)


def _words(name: str) -> str:
    """``order_items`` → ``order items``; ``OrderItems`` → ``order items``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", name).replace("_", " ")
    return " ".join(spaced.split()).lower() if spaced.strip() else name


def _quote(identifier: object, dialect: str | None) -> None:
    """Quote an identifier only when the dialect needs it (case, characters, keywords)."""
    from sqlglot import exp
    from sqlglot.dialects.dialect import Dialect

    if not isinstance(identifier, exp.Identifier) or identifier.quoted:
        return
    d = Dialect.get_or_raise(dialect)
    needs = (d.can_quote(identifier, "unsafe") or identifier.name.lower() in RESERVED
             or identifier.name.upper() in d.tokenizer_class.KEYWORDS)
    identifier.set("quoted", bool(needs))


def _ident(name: str, dialect: str | None) -> exp.Identifier:
    from sqlglot import exp

    identifier = exp.Identifier(this=name, quoted=False)
    _quote(identifier, dialect)
    return identifier


def _col(name: str, dialect: str | None) -> exp.Column:
    from sqlglot import exp

    return exp.Column(this=_ident(name, dialect))


def _table(name: str, dialect: str | None) -> exp.Table:
    from sqlglot import exp

    return exp.Table(this=_ident(name, dialect))


def _select_all(name: str, dialect: str | None) -> str:
    from sqlglot import exp

    return _sql(exp.select(exp.Star()).from_(_table(name, dialect)).limit(LIMIT), dialect)


def _sql(query: exp.Expr, dialect: str | None) -> str:
    return query.sql(dialect=dialect, pretty=False)
