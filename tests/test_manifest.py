"""Reading manifests: real ones, dirty ones, fuzzed ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import CORE, EXAMPLE_MANIFEST, REAL_MANIFESTS
from wrenmem.errors import ManifestError
from wrenmem.schema.manifest import fingerprint, load_manifest, parse_manifest


@pytest.mark.parametrize("path", [*REAL_MANIFESTS, EXAMPLE_MANIFEST], ids=lambda p: p.parent.name)
def test_real_manifests_load_without_warnings(path: Path) -> None:
    manifest = load_manifest(path)
    assert manifest.models and manifest.relationships and manifest.views
    assert manifest.warnings == ()
    assert len(manifest.fingerprint) == 16


def test_example_manifest_details() -> None:
    m = load_manifest(EXAMPLE_MANIFEST)
    assert m.dialect == "postgres"
    orders = m.model("orders")
    assert orders is not None and orders.primary_key == ("id",)
    status = next(c for c in orders.columns if c.name == "status")
    assert status.accepted_values == ("pending", "paid", "shipped", "delivered", "cancelled",
                                      "returned")
    line_total = next(c for c in m.model("order_items").columns if c.name == "line_total")
    assert line_total.is_calculated and line_total.expression.startswith("quantity *")
    payments = m.model("payments")
    hidden = [c.name for c in payments.columns if c.is_hidden]
    assert hidden == ["card_fingerprint"]
    assert "card_fingerprint" not in [c.name for c in payments.visible_columns()]
    cube = m.cubes[0]
    assert [f.name for f in cube.measures][:2] == ["total_revenue", "order_count"]
    assert cube.time_dimensions[0].granularities[-1] == "year"
    assert cube.description.startswith("Order revenue")
    assert m.views[0].description.startswith("Revenue and order count")


def test_table_columns_include_hidden_and_views() -> None:
    tables = load_manifest(EXAMPLE_MANIFEST).table_columns()
    assert tables["payments"]["card_fingerprint"] == "VARCHAR"
    assert tables["orders"]["amount"] == "DECIMAL"
    assert set(tables["monthly_revenue"]) == {"month", "order_count", "revenue"}
    assert "lifetime_value" in tables["customer_lifetime_value"]


def test_dialects() -> None:
    core = load_manifest(CORE)
    assert core.dialect == "mysql"
    assert parse_manifest({"dataSource": "MSSQL"}).dialect == "tsql"
    assert parse_manifest({"dataSource": "local_file"}).dialect == "duckdb"
    assert parse_manifest({"dataSource": "nosuchdb"}).dialect is None
    assert parse_manifest({}).dialect is None


def test_fingerprint_ignores_private_keys_and_key_order() -> None:
    doc = json.loads(EXAMPLE_MANIFEST.read_text())
    base = fingerprint(doc)
    doc["_instructions"] = "be nice"
    doc["models"][0]["_note"] = {"x": 1}
    assert fingerprint(doc) == base
    reordered = dict(reversed(list(doc.items())))
    assert fingerprint(reordered) == base
    doc["models"][0]["columns"][1]["type"] = "TEXT"
    assert fingerprint(doc) != base


def test_file_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(ManifestError, match="not found"):
        load_manifest(tmp_path / "nope.json")
    bad = tmp_path / "mdl.json"
    bad.write_text('{"models": [\n  {"name": "a",}\n]}')
    with pytest.raises(ManifestError, match=r"mdl\.json:2:\d+: manifest is not valid JSON"):
        load_manifest(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ManifestError, match="must be a JSON object, not a list"):
        load_manifest(bad)
    bad.write_bytes(b'{"catalog": "\xff"}')
    with pytest.raises(ManifestError, match="not valid UTF-8"):
        load_manifest(bad)


def test_wrong_section_type_is_an_error_naming_it() -> None:
    with pytest.raises(ManifestError, match="'models' must be a list, not a string"):
        parse_manifest({"models": "orders"})
    assert parse_manifest({"models": None, "cubes": None}).models == ()


def test_dirty_items_are_skipped_with_named_warnings() -> None:
    m = parse_manifest({
        "models": [
            None, {"columns": []}, {"name": 3}, {"name": "ok", "columns": [
                {"name": "a", "type": None, "notNull": "yes"}, "junk", {"type": "INT"},
                {"name": "b", "properties": "oops", "isHidden": None},
            ], "primaryKey": ["a"]},
            {"name": "ok"},
            {"name": "other", "columns": {"a": 1}},
        ],
        "relationships": [
            {"name": "r1", "models": "ab", "condition": "a.x = b.y"},
            {"name": "r2", "models": ["ok"]},
            {"name": "r3", "models": ["ok", None]},
            {"name": "r4", "models": ["ok", "other"], "condition": None},
        ],
        "views": [{"name": "v", "statement": {"sql": 1}}],
        "cubes": [{"name": "c", "measures": [None, {"name": "m", "expression": "SUM(a)"}],
                   "dimensions": "x", "hierarchies": []}],
    })
    assert [model.name for model in m.models] == ["ok", "other"]
    assert [c.name for c in m.models[0].columns] == ["a", "b"]
    assert m.models[0].columns[0].is_primary_key
    assert [r.name for r in m.relationships] == ["r4"]
    assert m.views[0].statement == ""
    assert [f.name for f in m.cubes[0].measures] == ["m"]
    text = "\n".join(m.warnings)
    for expected in ("models[0]: skipped, expected an object, got null",
                     "models[1]: skipped, it has no name",
                     "models[2]: skipped, it has name a number",
                     "models[3] 'ok'.columns[1]: skipped",
                     "models[3] 'ok'.columns[0] 'a': 'notNull' ignored",
                     "models[3] 'ok'.columns[3] 'b': 'properties' ignored",
                     "models[4] 'ok': skipped, the name is used twice",
                     "models[5] 'other': 'columns' ignored, expected a list",
                     "relationships[0] 'r1': skipped, 'models' must be a list of two",
                     "relationships[1] 'r2': skipped", "relationships[2] 'r3': skipped",
                     "views[0] 'v': 'statement' ignored",
                     "cubes[0] 'c'.measures[0]: skipped",
                     "cubes[0] 'c': 'dimensions' ignored"):
        assert expected in text, expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.text(max_size=6), children, max_size=4),
    max_leaves=20,
)
KEYS = ["name", "columns", "type", "models", "condition", "properties", "description",
        "accepted_values", "primaryKey", "isHidden", "isCalculated", "expression",
        "measures", "dimensions", "timeDimensions", "statement", "joinType", "baseObject",
        "hierarchies", "relationship", "notNull", "granularities"]
near_items = st.dictionaries(st.sampled_from(KEYS), json_values | st.lists(
    st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5), max_size=3), max_size=6)
manifests = st.dictionaries(
    st.sampled_from(["catalog", "schema", "dataSource", *["models", "relationships", "views",
                                                          "cubes"], "_x"]),
    st.lists(near_items | json_values, max_size=4) | json_values, max_size=6)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(manifests)
def test_fuzzed_manifests_never_crash(document: dict) -> None:
    """Any JSON either loads (maybe with warnings) or raises ManifestError: no traceback."""
    from wrenmem.schema.describe import describe
    from wrenmem.schema.items import schema_items
    from wrenmem.schema.seeds import generate_seeds

    try:
        manifest = parse_manifest(document)
    except ManifestError:
        return
    manifest.table_columns()
    describe(manifest)
    items = schema_items(manifest)
    assert len({i.id for i in items}) == len(items)
    generate_seeds(manifest)


@settings(max_examples=100, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
def test_fuzzed_files_never_crash(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "mdl.json"
    path.write_bytes(data)
    try:
        load_manifest(path)
    except ManifestError as e:
        assert str(path) in str(e)


# Strings with lone surrogates (JSON can spell "\ud800") and numbers of any size, anywhere.
hostile_text = st.text(st.characters(codec=None, categories=None), max_size=8)
hostile_numbers = st.integers(min_value=-(10 ** 6000), max_value=10 ** 6000) | st.floats()
hostile_values = st.recursive(
    st.none() | st.booleans() | hostile_numbers | hostile_text | st.sampled_from(KEYS),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(KEYS) | hostile_text, children, max_size=4),
    max_leaves=20,
)
hostile_manifests = st.fixed_dictionaries({}, optional={
    "dataSource": hostile_text | hostile_numbers,
    "models": st.lists(st.fixed_dictionaries(
        {"name": hostile_text | hostile_numbers},
        optional={"columns": st.lists(st.dictionaries(st.sampled_from(KEYS), hostile_values,
                                                      max_size=5), max_size=3),
                  "primaryKey": hostile_text, "properties": hostile_values}), max_size=3),
    "relationships": st.lists(hostile_values, max_size=2),
    "views": st.lists(hostile_values, max_size=2),
    "cubes": st.lists(hostile_values, max_size=2),
})


def _dumps(value: object) -> str:
    """JSON as a file holds it: huge integers as digits, NaN and infinities as JSON's
    extensions, lone surrogates as \\u escapes."""
    import sys

    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return json.dumps(value)
    finally:
        sys.set_int_max_str_digits(old)


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(document=hostile_manifests)
def test_fuzzed_manifest_strings_and_numbers_never_crash(tmp_path: Path, document: dict
                                                         ) -> None:
    """Whatever strings and numbers a manifest holds, everything derived from it can be
    printed and written as UTF-8 (describe, schema items, seeds, the fingerprint)."""
    from wrenmem.pairs.seeds import build_records
    from wrenmem.schema.describe import describe
    from wrenmem.schema.items import schema_items

    path = tmp_path / "mdl.json"
    path.write_text(_dumps(document), encoding="ascii")
    try:
        manifest = load_manifest(path)
    except ManifestError:
        return
    describe(manifest).encode("utf-8")
    for item in schema_items(manifest):
        item.text.encode("utf-8")
    json.dumps(build_records(manifest), ensure_ascii=False).encode("utf-8")
    "\n".join(manifest.warnings).encode("utf-8")
