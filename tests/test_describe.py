"""describe: the whole schema as plain text, as a new user reads it."""

from __future__ import annotations

import re

import pytest

from tests.conftest import CORE, EXAMPLE_MANIFEST, JAFFLE
from wrenmem.schema.describe import describe, sentence
from wrenmem.schema.manifest import load_manifest, parse_manifest


def test_example_schema_text() -> None:
    text = describe(load_manifest(EXAMPLE_MANIFEST))
    assert text.startswith("# Schema acme.public\nData source postgres (SQL dialect postgres); "
                           "7 models, 6 relationships, 2 views, 1 cube.\n")
    assert "\n## Models\n\n### Model customers\nOne row per registered shop customer." in text
    assert ("- status (VARCHAR; not null): Fulfilment status of the order. Accepted values: "
            "'pending', 'paid', 'shipped', 'delivered', 'cancelled', 'returned'.") in text
    assert ("- line_total (DECIMAL; calculated as quantity * unit_price - discount_amount): "
            "Net amount of the line in USD") in text
    assert "card_fingerprint" not in text  # hidden column
    assert ("### Relationship orders_customer\nJoins orders to customers (many to one) on "
            "orders.customer_id = customers.id.") in text
    assert "### View monthly_revenue\nRevenue and order count per calendar month" in text
    assert "SQL:\n    SELECT DATE_TRUNC('month', ordered_at) AS month,\n" in text
    assert "### Cube sales_metrics over orders\nOrder revenue, counts and shipping fees" in text
    assert "- total_revenue (DECIMAL) = SUM(amount)." in text
    assert "- status (VARCHAR)." in text  # a dimension whose expression is its name
    assert "- ordered_at (TIMESTAMP): Granularities: day, week, month, quarter, year." in text


@pytest.mark.parametrize("path", [EXAMPLE_MANIFEST, JAFFLE, CORE], ids=lambda p: p.parent.name)
def test_punctuation_and_determinism(path) -> None:
    manifest = load_manifest(path)
    text = describe(manifest)
    assert text == describe(load_manifest(path))
    assert text.endswith("\n") and not text.endswith("\n\n")
    assert ".." not in text and " ." not in text and "()" not in text
    assert not re.search(r"[ \t]$", text, re.M)
    for line in text.splitlines():
        if line.startswith("- ") or (line and not line.startswith(("#", " ")) and
                                     not line.endswith(":")):
            assert line[-1] in ".)", line


def test_core_base_relationship_columns_and_composite_keys() -> None:
    text = describe(load_manifest(CORE))
    assert "- orders (relationship CustomerOrders to orders): This is a customer orders " \
           "relationship." in text
    assert "- totalcost (integer; calculated as sum(customer.orders.o_totalprice))." in text
    composite = parse_manifest({"models": [{"name": "m", "primaryKey": ["a", "b"], "columns": [
        {"name": "a", "type": "INT"}, {"name": "b"}]}]})
    out = describe(composite)
    assert "Composite primary key: a, b." in out
    assert "- a (INT; primary key)." in out and "- b (type unknown; primary key)." in out


def test_sparse_manifests_read_well() -> None:
    assert describe(parse_manifest({})) == "# Schema\nNo models.\n"
    text = describe(parse_manifest({"models": [{"name": "t"}], "relationships": [
        {"name": "r", "models": ["t", "t"]}], "views": [{"name": "v"}]}))
    assert "### Model t\nNo columns are declared." in text
    assert "Joins t to t; no join condition is declared." in text
    assert "### View v\nNo SQL statement is declared." in text


def test_sentence() -> None:
    assert sentence("ends with a period.") == "ends with a period."
    assert sentence("  two\n lines ") == "two lines."
    assert sentence("") == ""
    assert sentence("问题？") == "问题？"
