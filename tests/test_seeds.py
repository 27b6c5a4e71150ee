"""Seed queries: parse in the manifest's dialect, never sum identifiers, quote when needed."""

from __future__ import annotations

import pytest
import sqlglot
from sqlglot import exp

from tests.conftest import EXAMPLE_MANIFEST, REAL_MANIFESTS
from wrenmem.schema.manifest import load_manifest, parse_manifest
from wrenmem.schema.seeds import generate_seeds, relationship_keys

REAL = [*REAL_MANIFESTS, EXAMPLE_MANIFEST]


def summed_columns(sql: str, dialect: str | None) -> set[str]:
    tree = sqlglot.parse_one(sql, read=dialect)
    return {c.name.lower() for s in tree.find_all(exp.Sum) for c in s.find_all(exp.Column)}


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name)
def test_real_manifest_seeds_parse_and_never_sum_identifiers(path) -> None:
    manifest = load_manifest(path)
    seeds = generate_seeds(manifest)
    assert seeds
    keys = relationship_keys(manifest)
    for seed in seeds:
        sqlglot.parse_one(seed.sql, read=manifest.dialect)  # raises if it does not parse
        model = manifest.model(seed.model)
        for name in summed_columns(seed.sql, manifest.dialect):
            assert name != "id" and not name.endswith(("_id", "key")), seed.sql
            assert name not in keys.get(seed.model, set()), seed.sql
            assert name not in {k.lower() for k in model.primary_key}, seed.sql
    assert len({s.key for s in seeds}) == len(seeds)
    assert len({s.nl for s in seeds}) == len(seeds)


def test_example_seeds() -> None:
    seeds = {s.key: s for s in generate_seeds(load_manifest(EXAMPLE_MANIFEST))}
    assert seeds["model/orders/list"].sql == "SELECT * FROM orders LIMIT 100"
    assert seeds["model/orders/sum/amount"].sql == \
        "SELECT SUM(amount) AS total_amount FROM orders"
    assert seeds["model/orders/grouped_sum/amount/status"].sql == (
        "SELECT status, SUM(amount) AS total_amount FROM orders GROUP BY status")
    assert seeds["model/orders/filter/status"].sql == \
        "SELECT * FROM orders WHERE status = 'pending' LIMIT 100"
    assert seeds["model/orders/filter/status"].nl == "Show orders where status is pending"
    join = seeds["relationship/order_items_product/join"]
    assert join.nl == "List order items with their products"
    assert join.sql == ("SELECT * FROM order_items JOIN products ON order_items.product_id = "
                        "products.id LIMIT 100")
    assert "view/monthly_revenue/list" in seeds
    # order_items: quantity is the first summable column (id, order_id, product_id are keys)
    assert "model/order_items/sum/quantity" in seeds
    assert not any("card_fingerprint" in s.sql for s in seeds.values())  # hidden
    kinds = {s.kind for s in seeds.values()}
    assert kinds == {"list", "sum", "grouped_sum", "filter", "join"}


def test_identifier_exclusions() -> None:
    manifest = parse_manifest({"dataSource": "postgres", "models": [
        {"name": "a", "primaryKey": ["k1", "k2"], "columns": [
            {"name": "k1", "type": "INT"}, {"name": "k2", "type": "INT"},
            {"name": "CUSTOMER_ID", "type": "INT"}, {"name": "id", "type": "BIGINT"},
            {"name": "created_by", "type": "INT"}, {"name": "Custkey", "type": "INT"},
            {"name": "AccountId", "type": "INT"}, {"name": "year", "type": "INT"},
            {"name": "calc", "type": "INT", "isCalculated": True, "expression": "k1 + 1"},
            {"name": "secret", "type": "INT", "isHidden": True},
            {"name": "qty", "type": "DECIMAL(10,2)"}]},
        {"name": "b", "columns": [{"name": "uid", "type": "INT"}]}],
        "relationships": [
            {"name": "r1", "models": ["a", "b"], "condition": "a.created_by = b.uid"},
            {"name": "r2", "models": ["a", "b"], "condition": 'X."Custkey" = Y.uid'}]})
    keys = relationship_keys(manifest)
    assert keys["a"] == {"created_by", "custkey"}  # aliases X/Y mapped to the two ends
    sums = [s for s in generate_seeds(manifest) if s.kind == "sum"]
    assert [s.sql for s in sums] == ["SELECT SUM(qty) AS total_qty FROM a"]


def test_only_text_columns_gives_only_listing() -> None:
    manifest = parse_manifest({"models": [{"name": "t", "columns": [
        {"name": "a", "type": "VARCHAR"}, {"name": "b", "type": "TEXT"}]}]})
    assert [s.kind for s in generate_seeds(manifest)] == ["list"]


def test_raw_layer_models_and_their_joins_are_skipped() -> None:
    manifest = parse_manifest({"models": [
        {"name": "src", "properties": {"dbtLayer": "raw"}, "columns": [{"name": "x"}]},
        {"name": "mart", "columns": [{"name": "x"}]}],
        "relationships": [{"name": "r", "models": ["mart", "src"],
                           "condition": "mart.x = src.x"}]})
    assert [s.key for s in generate_seeds(manifest)] == ["model/mart/list"]


@pytest.mark.parametrize("dialect,expected", [
    ("postgres", 'SELECT "select", SUM("Amount") AS total_amount FROM "My Orders" '
                 'GROUP BY "select"'),
    ("bigquery", "SELECT `select`, SUM(Amount) AS total_amount FROM `My Orders` "
                 "GROUP BY `select`"),
    ("mssql", "SELECT [select], SUM(Amount) AS total_amount FROM [My Orders] "
              "GROUP BY [select]"),
])
def test_identifiers_quoted_where_needed(dialect: str, expected: str) -> None:
    manifest = parse_manifest({"dataSource": dialect, "models": [{"name": "My Orders",
                               "columns": [{"name": "Amount", "type": "NUMERIC"},
                                           {"name": "select", "type": "VARCHAR",
                                            "properties": {"accepted_values": ["it's", "b"]}}]}]})
    seeds = {s.kind: s for s in generate_seeds(manifest)}
    # Postgres folds unquoted names to lower case, so "Amount" stays quoted there only.
    assert seeds["grouped_sum"].sql == expected
    tree = sqlglot.parse_one(seeds["filter"].sql, read=manifest.dialect)
    assert [lit.this for lit in tree.find_all(exp.Literal) if lit.is_string] == ["it's"]
    for seed in seeds.values():
        sqlglot.parse_one(seed.sql, read=manifest.dialect)


def test_unparseable_condition_loses_only_that_join() -> None:
    manifest = parse_manifest({"models": [{"name": "a", "columns": [{"name": "x"}]},
                                          {"name": "b", "columns": [{"name": "x"}]}],
                               "relationships": [{"name": "r", "models": ["a", "b"],
                                                  "condition": "a.x = = ("}]})
    assert [s.key for s in generate_seeds(manifest)] == ["model/a/list", "model/b/list"]


def _quoted_join_manifest(data_source: str) -> dict:
    return {"catalog": "c", "schema": "s", "dataSource": data_source, "models": [
        {"name": "Order Items", "columns": [{"name": "id", "type": "INTEGER"},
                                            {"name": "buyer", "type": "INTEGER"},
                                            {"name": "price", "type": "DECIMAL"}],
         "primaryKey": "id"},
        {"name": "Customers", "columns": [{"name": "id", "type": "INTEGER"},
                                          {"name": "name", "type": "VARCHAR"}],
         "primaryKey": "id"}],
        "relationships": [{"name": "buyer", "models": ["Order Items", "Customers"],
                           "joinType": "MANY_TO_ONE",
                           "condition": '"Order Items".buyer = "Customers".id'}]}


@pytest.mark.parametrize("data_source", sorted(
    {v: k for k, v in __import__("wrenmem.schema.manifest", fromlist=["x"])
     .DATASOURCE_DIALECTS.items()}.values()))
def test_join_seeds_keep_quoted_join_columns_in_every_dialect(data_source: str) -> None:
    """A double-quoted name in a Wren condition is an identifier in every dialect's seed,
    never a string literal ('Order Items'.buyer parses in MySQL and BigQuery, wrongly)."""
    manifest = parse_manifest(_quoted_join_manifest(data_source))
    dialect = manifest.dialect
    join = next(s for s in generate_seeds(manifest) if s.kind == "join")
    tree = sqlglot.parse_one(join.sql, read=dialect)
    on = tree.find(exp.Join).args["on"]
    columns = {(c.table, c.name) for c in on.find_all(exp.Column)}
    assert columns == {("Order Items", "buyer"), ("Customers", "id")}, (dialect, join.sql)
    assert not list(on.find_all(exp.Literal)), join.sql
    assert relationship_keys(manifest)["Order Items"] >= {"buyer"}
    # `price` is summed; `buyer`, a relationship key, never is.
    sums = {s.sql for s in generate_seeds(manifest) if s.kind == "sum"}
    assert all("buyer" not in sql for sql in sums) and any("price" in sql for sql in sums)
