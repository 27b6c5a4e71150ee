"""Schema items: one record per element, with stable ids and change-sensitive hashes."""

from __future__ import annotations

import json

import pytest

from tests.conftest import EXAMPLE_MANIFEST
from wrenmem.schema.items import ITEM_TYPES, normalize_types, schema_items
from wrenmem.schema.manifest import load_manifest, parse_manifest


def test_example_items() -> None:
    items = schema_items(load_manifest(EXAMPLE_MANIFEST))
    by_id = {i.id: i for i in items}
    assert len(by_id) == len(items)
    counts = {t: sum(1 for i in items if i.type == t) for t in ITEM_TYPES}
    assert counts == {"model": 7, "column": 49, "relationship": 6, "view": 2, "cube": 1,
                      "measure": 4, "dimension": 3, "time_dimension": 1}
    assert "column:payments.card_fingerprint" not in by_id  # hidden
    amount = by_id["column:orders.amount"]
    assert amount.text == ("Column amount (DECIMAL, not null) in model orders: Order total in "
                           "USD after discounts, excluding shipping.")
    assert (amount.model, amount.data_type) == ("orders", "DECIMAL")
    line = by_id["column:order_items.line_total"]
    assert line.is_calculated and line.expression == "quantity * unit_price - discount_amount"
    rel = by_id["relationship:orders_customer"]
    assert (rel.model, rel.related, rel.expression) == ("orders", "customers",
                                                        "orders.customer_id = customers.id")
    measure = by_id["measure:sales_metrics.total_revenue"]
    assert measure.model == "orders" and measure.related == "sales_metrics"
    assert "SUM(amount)" in measure.text
    view = by_id["view:monthly_revenue"]
    assert "Columns: month, order_count, revenue." in view.text
    assert view.detail.startswith("View monthly_revenue: Revenue and order count")


def test_filters_match_model_and_related() -> None:
    from wrenmem.schema.cache import _build

    prepared = _build(load_manifest(EXAMPLE_MANIFEST))
    ids = [r[0] for r in prepared.records]
    customers = {i for n, i in enumerate(ids) if prepared.matches(n, (), "customers")}
    assert "relationship:orders_customer" in customers  # the other end counts too
    assert "column:customers.email" in customers and "column:orders.amount" not in customers
    cube_side = {i for n, i in enumerate(ids) if prepared.matches(n, ("measure",), "orders")}
    assert len(cube_side) == 4


def test_hash_changes_only_for_the_changed_item() -> None:
    doc = json.loads(EXAMPLE_MANIFEST.read_text())
    before = {i.id: i.item_hash for i in schema_items(load_manifest(EXAMPLE_MANIFEST))}
    doc["models"][4]["columns"][6]["properties"]["description"] = "Order total, net of tax."
    after = {i.id: i.item_hash for i in schema_items(parse_manifest(doc))}
    assert {k for k in before if before[k] != after[k]} == {"column:orders.amount"}
    doc["models"][4]["columns"][6]["type"] = "NUMERIC"
    typed = {i.id: i.item_hash for i in schema_items(parse_manifest(doc))}
    assert {k for k in after if after[k] != typed[k]} == {"column:orders.amount"}


def test_normalize_types() -> None:
    assert normalize_types(["column,model", "cube_dimension", "measures"]) == (
        "column", "model", "dimension", "measure")
    with pytest.raises(ValueError, match="unknown item type 'colum'"):
        normalize_types(["colum"])


HIDDEN_SCOPED = {
    "catalog": "c", "schema": "s", "dataSource": "postgres",
    "models": [{"name": "payments", "primaryKey": "id",
                "properties": {"dataScope": "Card payments since 2020, EU stores only"},
                "columns": [
                    {"name": "id", "type": "INTEGER",
                     "properties": {"dbtTests": ["unique", "not_null"],
                                    "dbtTestStatus": "pass"}},
                    {"name": "amount", "type": "DECIMAL"},
                    {"name": "card_secret", "type": "VARCHAR", "isHidden": True}]}],
    "views": [{"name": "all_payments", "statement": "SELECT * FROM payments"},
              {"name": "named", "statement": "SELECT id, card_secret FROM payments"}],
}


def test_hidden_columns_appear_nowhere_people_or_search_look() -> None:
    from wrenmem.schema.describe import describe as describe_manifest

    manifest = parse_manifest(HIDDEN_SCOPED)
    items = schema_items(manifest)
    assert all("card_secret" not in i.text for i in items if i.type != "view" or
               "SELECT" not in i.text), [i.text for i in items]
    view = next(i for i in items if i.id == "view:all_payments")
    assert "Columns: id, amount." in view.text and "card_secret" not in view.text
    named = next(i for i in items if i.id == "view:named")
    assert "Columns: id." in named.text  # only its SQL still names the hidden column
    assert "card_secret" not in describe_manifest(manifest).split("### View")[0]
    # SQL may still use the hidden column: validation knows it.
    assert "card_secret" in manifest.table_columns()["all_payments"]


def test_the_data_scope_and_dbt_tests_reach_search_and_describe() -> None:
    from wrenmem.schema.describe import describe as describe_manifest

    manifest = parse_manifest(HIDDEN_SCOPED)
    by_id = {i.id: i for i in schema_items(manifest)}
    assert "Data scope: Card payments since 2020, EU stores only." in by_id["model:payments"].text
    assert "Data scope:" in by_id["model:payments"].detail
    assert "dbt tests: unique, not_null (status: pass)." in by_id["column:payments.id"].text
    text = describe_manifest(manifest)
    assert "dbt tests: unique, not_null (status: pass)." in text
    assert "Data scope: Card payments since 2020, EU stores only." in text
