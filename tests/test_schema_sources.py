"""Schema sources besides a Wren MDL: a dbt manifest.json, SQL DDL, a DuckDB or SQLite file.

Each is tested through the CLI (a real ``python -m wrenmem`` process) and the API on real
public examples: dbt Labs' jaffle_shop as dbt compiled it, and Spider's concert_singer
``schema.sql``; the DuckDB and SQLite files are built here from that DDL.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, write_pair
from wrenmem import Memory
from wrenmem.errors import ManifestError
from wrenmem.schema.manifest import load_manifest
from wrenmem.schema.sources.ddl import statements

DBT = FIXTURES / "dbt-jaffle-shop-classic" / "target" / "manifest.json"
SPIDER = FIXTURES / "spider-concert-singer" / "schema.sql"
SOURCES = ("dbt", "ddl", "duckdb", "sqlite")


def build_sqlite(path: Path) -> Path:
    """Spider's concert_singer database as SQLite builds it from its own schema.sql."""
    con = sqlite3.connect(path)
    con.executescript(SPIDER.read_text())
    con.commit()
    con.close()
    return path


def build_duckdb(path: Path) -> Path:
    """The concert_singer tables in DuckDB. DuckDB refuses two of Spider's foreign keys (a
    text column referring to an integer key), so those tables are made without them, and
    a table of this test adds a foreign key DuckDB takes; a comment describes a table."""
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect(str(path))
    for _line, statement in statements(SPIDER.read_text()):
        try:
            con.execute(statement)
        except duckdb.Error:
            kept = [ln for ln in statement.splitlines() if "FOREIGN KEY" not in ln]
            con.execute("\n".join(kept).replace('"),\n)', '")\n)'))
    con.execute('CREATE TABLE ticket (ticket_id INTEGER PRIMARY KEY, '
                '"concert_ID" INTEGER REFERENCES concert("concert_ID"), price DECIMAL(8, 2))')
    con.execute("COMMENT ON TABLE singer IS 'Singers and their best-known song'")
    con.execute("COMMENT ON COLUMN singer.\"Age\" IS 'Age in years'")
    con.execute('CREATE VIEW young_singers AS SELECT "Name", "Age" FROM singer WHERE "Age" < 30')
    con.close()
    return path


def source_project(root: Path, kind: str) -> Path:
    """A project whose ``manifest`` setting names a schema source of ``kind``."""
    (root / "knowledge" / "sql").mkdir(parents=True, exist_ok=True)
    target = root / "schema"
    target.mkdir()
    if kind == "dbt":
        path = target / "manifest.json"
        shutil.copyfile(DBT, path)
    elif kind == "ddl":
        path = target / "schema.sql"
        shutil.copyfile(SPIDER, path)
    elif kind == "duckdb":
        path = build_duckdb(target / "concert.duckdb")
    else:
        path = build_sqlite(target / "concert.sqlite")
    (root / "wrenmem.toml").write_text(f'manifest = "schema/{path.name}"\n')
    return path


# What each source must show: a table, a column of it, and the kind the header names.
EXPECTED = {
    "dbt": ("Read from a dbt manifest", "### Model orders",
            "- status (type unknown): Orders can be one of the following statuses"),
    "ddl": ("Read from SQL DDL", "### Model singer", "- Age (INT)."),
    "duckdb": ("Read from a DuckDB database", "### Model singer", "- Age (INTEGER): Age in "
               "years."),
    "sqlite": ("Read from a SQLite database", "### Model singer", "- Age (INT)."),
}


@pytest.mark.parametrize("kind", SOURCES)
def test_describe_reads_each_source_through_the_cli_and_the_api(tmp_path: Path, kind: str,
                                                                wrenmem_proc) -> None:
    root = tmp_path / "proj"
    source_project(root, kind)
    out = wrenmem_proc("--project", str(root), "describe")
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    for expected in EXPECTED[kind]:
        assert expected in out.stdout, (kind, expected, out.stdout[:2000])
    assert Memory(root).describe() == out.stdout
    data = json.loads(wrenmem_proc("--project", str(root), "describe", "--json").stdout)
    assert data["source"] == {"dbt": "dbt manifest", "ddl": "SQL DDL",
                              "duckdb": "DuckDB database", "sqlite": "SQLite database"}[kind]


def test_the_dbt_manifest_gives_descriptions_tests_keys_and_relationships() -> None:
    manifest = load_manifest(DBT)
    assert manifest.source == "dbt manifest" and manifest.dialect == "duckdb"
    assert [m.name for m in manifest.models] == [
        "customers", "orders", "stg_customers", "stg_orders", "stg_payments",
        "raw_customers", "raw_orders", "raw_payments"]
    orders = manifest.model("orders")
    assert orders is not None and orders.primary_key == ("order_id",)
    status = next(c for c in orders.columns if c.name == "status")
    assert status.accepted_values == ("placed", "shipped", "completed", "return_pending",
                                      "returned")
    customer_id = next(c for c in orders.columns if c.name == "customer_id")
    assert customer_id.not_null and customer_id.description == \
        "Foreign key to the customers table"
    assert "relationships" in customer_id.dbt_tests
    [joined] = manifest.relationships
    assert (joined.left, joined.right, joined.join_type, joined.condition) == (
        "orders", "customers", "MANY_TO_ONE", "orders.customer_id = customers.customer_id")
    staging = manifest.model("stg_orders")
    seed = manifest.model("raw_orders")
    assert staging is not None and staging.layer == "staging"
    assert seed is not None and seed.layer == "seed"
    assert manifest.warnings == ()


def test_dbt_types_come_from_catalog_json_beside_the_manifest(tmp_path: Path) -> None:
    path = tmp_path / "manifest.json"
    shutil.copyfile(DBT, path)
    assert next(c for c in load_manifest(path).model("orders").columns  # type: ignore[union-attr]
                if c.name == "amount").type == ""
    catalog = {"metadata": {}, "nodes": {"model.jaffle_shop.orders": {"columns": {
        "ORDER_ID": {"name": "order_id", "type": "INTEGER", "index": 1},
        "AMOUNT": {"name": "amount", "type": "DOUBLE", "index": 9},
        "COUPON_AMOUNT": {"name": "coupon_amount", "type": "DOUBLE", "index": 6}}}}}
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))
    orders = load_manifest(path).model("orders")
    assert orders is not None
    types = {c.name: c.type for c in orders.columns}
    assert types["amount"] == "DOUBLE" and types["order_id"] == "INTEGER"
    (tmp_path / "catalog.json").write_text("{not json")
    manifest = load_manifest(path)
    assert any("catalog.json: not read (not valid JSON" in w for w in manifest.warnings)
    assert len(manifest.models) == 8  # a bad catalog loses the types, nothing else


def test_dbt_semantic_models_become_cubes_and_metrics_their_measures(tmp_path: Path) -> None:
    # The shapes dbt 1.7+ writes for a semantic model and metrics (the jaffle-shop example's
    # orders semantic model, in short), added to the real manifest.
    document = json.loads(DBT.read_text())
    document["semantic_models"] = {"semantic_model.jaffle_shop.orders": {
        "name": "orders_sm", "model": "ref('orders')",
        "description": "Order fact table, one row per order.",
        "entities": [{"name": "order", "type": "primary", "expr": "order_id"},
                     {"name": "customer", "type": "foreign", "expr": "customer_id"}],
        "dimensions": [{"name": "order_date", "type": "time",
                        "type_params": {"time_granularity": "day"}},
                       {"name": "status", "type": "categorical"}],
        "measures": [{"name": "order_total", "agg": "sum", "expr": "amount",
                      "description": "The total amount of each order."},
                     {"name": "order_count", "agg": "sum", "expr": "1"}]},
        "semantic_model.jaffle_shop.customers": {
            "name": "customers_sm", "model": "ref('customers')",
            "entities": [{"name": "customer", "type": "primary", "expr": "customer_id"}],
            "dimensions": [], "measures": []}}
    document["metrics"] = {
        "metric.jaffle_shop.order_total": {
            "name": "order_total", "type": "simple", "label": "Order Total",
            "description": "Sum of order amounts.",
            "type_params": {"measure": {"name": "order_total"}}},
        "metric.jaffle_shop.large_orders": {
            "name": "large_orders", "type": "simple", "label": "Large Orders",
            "type_params": {"measure": {"name": "order_count"}},
            "filter": {"where_filters": [
                {"where_sql_template": "{{ Dimension('order__status') }} = 'shipped'"}]}},
        "metric.jaffle_shop.average_order": {
            "name": "average_order", "type": "ratio", "type_params": {
                "numerator": {"name": "order_total"}, "denominator": {"name": "order_count"}}},
        "metric.jaffle_shop.lost": {"name": "lost", "type": "simple",
                                    "type_params": {"measure": {"name": "nowhere"}}}}
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(document))
    manifest = load_manifest(path)
    cube = next(c for c in manifest.cubes if c.name == "orders_sm")
    assert cube.base_object == "orders"
    assert [(m.name, m.expression) for m in cube.measures] == [
        ("order_total", "SUM(amount)"), ("order_count", "SUM(1)"),
        ("large_orders", "order_count"), ("average_order", "order_total / order_count")]
    total = cube.measures[0]
    assert total.description == "Order Total. Sum of order amounts"
    assert "Filter: {{ Dimension('order__status') }} = 'shipped'" in \
        cube.measures[2].description
    assert [(d.name, d.granularities) for d in cube.time_dimensions] == [("order_date",
                                                                          ("day",))]
    assert [d.name for d in cube.dimensions] == ["status"]
    assert any("metric.jaffle_shop.lost: metric ignored" in w for w in manifest.warnings)
    # the foreign entity is the relationships test's join, already there: not made twice
    assert len(manifest.relationships) == 1
    from wrenmem.schema.describe import describe

    assert "### Cube orders_sm" in describe(manifest)


@pytest.mark.parametrize("kind", SOURCES)
def test_fetch_from_each_source(tmp_path: Path, kind: str, wrenmem_proc) -> None:
    root = tmp_path / "proj"
    source_project(root, kind)
    table = "orders" if kind == "dbt" else "singer"
    column = "status" if kind == "dbt" else "Song_Name"
    out = wrenmem_proc("--project", str(root), "fetch", "-q", f"{table} {column}", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["strategy"] == "full" and f"### Model {table}" in data["schema"]
    out = wrenmem_proc("--project", str(root), "fetch", "-q", f"{table} {column}",
                       "--threshold", "0", "--backend", "grep", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["strategy"] == "search"
    names = [(i["type"], i["model"], i["name"]) for i in data["results"]]
    assert ("column", table, column) in names, names
    api = Memory(root).fetch(f"{table} {column}", threshold=0)
    assert (table, column) in [(r.item.model, r.item.name) for r in api.results]


# A pair naming a column no table has, one naming a table that is not there, and one the
# engine rejects (a column both joined tables have), for each source.
BROKEN = {
    "dbt": ("SELECT first_nme FROM customers", "SELECT * FROM shipments",
            "SELECT customer_id FROM orders JOIN customers "
            "ON orders.customer_id = customers.customer_id"),
    "spider": ('SELECT "Nme" FROM singer', "SELECT * FROM albums",
               'SELECT "Stadium_ID" FROM concert JOIN stadium '
               'ON concert."Stadium_ID" = stadium."Stadium_ID"'),
}


@pytest.mark.parametrize("kind", SOURCES)
def test_validate_checks_names_and_the_engine_binds_from_each_source(
        tmp_path: Path, kind: str, wrenmem_proc) -> None:
    pytest.importorskip("duckdb")
    root = tmp_path / "proj"
    source_project(root, kind)
    column, table, ambiguous = BROKEN["dbt" if kind == "dbt" else "spider"]
    good = ("SELECT status, COUNT(*) FROM orders GROUP BY status" if kind == "dbt" else
            'SELECT s."Name", c."Year" FROM singer_in_concert sc '
            'JOIN concert c ON c."concert_ID" = sc."concert_ID" '
            'JOIN singer s ON s."Name" = \'Joe Sharp\'')
    write_pair(root, "column.md", "A column that is not there", column)
    write_pair(root, "table.md", "A table that is not there", table)
    write_pair(root, "ambiguous.md", "Which stadium", ambiguous)
    write_pair(root, "good.md", "A good one", good)
    out = wrenmem_proc("--project", str(root), "validate", "--json")
    assert out.returncode == 1, out.stderr
    problems = {(Path(p["path"]).name, p["code"]) for p in json.loads(out.stdout)["problems"]
                if p["code"] != "WM010"}
    assert problems == {("column.md", "WM004"), ("table.md", "WM003"),
                        ("ambiguous.md", "WM009")}, out.stdout
    api = {(Path(p.path).name, p.code) for p in Memory(root).validate() if p.code != "WM010"}
    assert api == problems


def test_the_kind_is_told_by_the_content_not_the_name(tmp_path: Path) -> None:
    # DDL under the default manifest name, a database named .sql, a dbt manifest as mdl.json
    ddl = tmp_path / "mdl.json"
    shutil.copyfile(SPIDER, ddl)
    assert load_manifest(ddl).source == "SQL DDL"
    db = build_sqlite(tmp_path / "schema.sql")
    assert load_manifest(db).source == "SQLite database"
    dbt = tmp_path / "other.json"
    shutil.copyfile(DBT, dbt)
    assert load_manifest(dbt).source == "dbt manifest"
    assert load_manifest(FIXTURES / "mdl" / "v5-jaffle" / "mdl.json").source == "Wren MDL"


def test_databases_are_opened_read_only_and_left_unchanged(tmp_path: Path) -> None:
    for path in (build_sqlite(tmp_path / "c.sqlite"), build_duckdb(tmp_path / "c.duckdb")):
        before = (path.read_bytes(), path.stat().st_mtime_ns)
        os.chmod(path, 0o444)
        try:
            manifest = load_manifest(path)
        finally:
            os.chmod(path, 0o644)
        assert (path.read_bytes(), path.stat().st_mtime_ns) == before
        assert manifest.model("singer") is not None
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(path.name)) \
            == [path.name]  # no journal, WAL or lock file left beside it


def test_ddl_keys_comments_and_views(tmp_path: Path) -> None:
    path = tmp_path / "shop.sql"
    path.write_text("""-- Name: customers; Type: TABLE; Schema: public; Owner: -
-- People who buy from the shop
CREATE TABLE public.customers (
  id INTEGER PRIMARY KEY, -- the customer's number
  name VARCHAR(100) NOT NULL COMMENT 'full name',
  email TEXT
);
COMMENT ON COLUMN customers.email IS 'Where receipts go';
CREATE TABLE orders (
  id INTEGER,
  customer_id INTEGER REFERENCES customers(id),
  total NUMERIC(10, 2)
);
ALTER TABLE ONLY public.orders ADD CONSTRAINT orders_pkey PRIMARY KEY (id);
CREATE VIEW big_orders (order_id, amount) AS SELECT id, total FROM orders WHERE total > 100;
INSERT INTO customers VALUES (1, 'a; b', 'x');
""")
    manifest = load_manifest(path)
    assert manifest.warnings == ()
    customers, orders = manifest.models
    assert customers.description == "People who buy from the shop"
    assert [(c.name, c.description) for c in customers.columns] == [
        ("id", "the customer's number"), ("name", "full name"), ("email", "Where receipts go")]
    assert orders.primary_key == ("id",)
    [joined] = manifest.relationships
    assert (joined.left, joined.right, joined.condition) == (
        "orders", "customers", "orders.customer_id = customers.id")
    assert manifest.table_columns()["big_orders"] == {"order_id": "", "amount": ""}


def test_a_bad_ddl_statement_is_a_warning_with_its_line_and_the_rest_is_read(
        tmp_path: Path, cli) -> None:
    path = tmp_path / "schema.sql"
    path.write_text("CREATE TABLE a (x INT);\n\nCREATE TABLE b (y INT (;\n"
                    "CREATE TABLE c (z INT);\nCREATE TABLE d y INT);\n")
    manifest = load_manifest(path)
    assert [m.name for m in manifest.models] == ["a", "c"]
    first, second = manifest.warnings
    assert first.startswith("line 3: statement skipped, sqlglot cannot read it: Expecting )")
    assert second == ("line 5: statement skipped, sqlglot cannot read it (unsupported "
                      "syntax): CREATE TABLE d y INT)")
    out = cli("describe", "--manifest", str(path))
    assert out.exit_code == 0 and "### Model c" in out.output
    assert f"warning: {path}: line 3: statement skipped" in out.stderr


def test_what_is_no_schema_at_all_is_an_error_naming_the_file(tmp_path: Path,
                                                              wrenmem_proc) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("just some notes, no tables\n")
    with pytest.raises(ManifestError, match=r"notes\.txt: not a manifest: .*no CREATE TABLE"):
        load_manifest(notes)
    broken = tmp_path / "broken.sqlite"
    broken.write_bytes(b"SQLite format 3\x00" + b"\x07" * 200)
    with pytest.raises(ManifestError, match=r"broken\.sqlite: cannot (open|read) the SQLite"):
        load_manifest(broken)
    root = tmp_path / "proj"
    (root / "knowledge" / "sql").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(notes, root / "notes.txt")
    (root / "wrenmem.toml").write_text('manifest = "notes.txt"\n')
    out = wrenmem_proc("--project", str(root), "describe")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stderr.startswith("error: ") and "notes.txt: not a manifest" in out.stderr


def test_a_changed_database_is_read_again(tmp_path: Path, wrenmem_proc) -> None:
    root = tmp_path / "proj"
    path = source_project(root, "sqlite")
    question = ["fetch", "-q", "tour dates", "--threshold", "0", "--backend", "grep", "--json"]
    first = json.loads(wrenmem_proc("--project", str(root), *question).stdout)
    assert "tour" not in json.dumps(first["results"])
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE tour (tour_id INTEGER PRIMARY KEY, dates TEXT)")
    con.commit()
    con.close()
    second = json.loads(wrenmem_proc("--project", str(root), *question).stdout)
    assert ("tour", "dates") in [(i["model"], i["name"]) for i in second["results"]]
    assert second["fingerprint"] != first["fingerprint"]


def test_a_database_given_as_bytes_reads_as_the_file_does(tmp_path: Path) -> None:
    # what `diff` does with a committed database: its bytes from git, not a file
    path = build_sqlite(tmp_path / "c.sqlite")
    from_file = load_manifest(path)
    from_bytes = load_manifest(path, path.read_bytes())
    assert from_bytes.fingerprint == from_file.fingerprint
    assert from_bytes.models == from_file.models


def test_a_table_without_columns_leaves_the_name_checks_on() -> None:
    # dbt seeds with no documented columns (as in jaffle_shop) once made sqlglot refuse the
    # whole schema, and every name check passed in silence; a Wren MDL model without
    # columns did the same
    from wrenmem.checks.references import check_schema
    from wrenmem.schema.manifest import parse_manifest

    for manifest, bare in ((load_manifest(DBT), "raw_customers"), (parse_manifest({"models": [
            {"name": "seeded"}, {"name": "customers", "columns": [{"name": "first_name"}]}]}),
            "seeded")):
        tables = manifest.table_columns()
        assert tables[bare] == {}
        [problem] = check_schema("SELECT first_nme FROM customers", "duckdb", tables)
        assert problem.message.startswith("unknown column 'first_nme'")
        assert check_schema(f"SELECT anything FROM {bare}", "duckdb", tables) == []
        [problem] = check_schema("SELECT * FROM shipments", "duckdb", tables)
        assert problem.message.startswith("unknown table 'shipments'")


def test_a_wide_table_is_read_and_a_too_deep_statement_is_a_warning(tmp_path: Path) -> None:
    # a schema's flat CREATE TABLE may be longer than any pair's SQL (200,000 characters
    # here, over the 100,000 a pair may have); nesting is held to the same bound as a pair's
    wide = tmp_path / "wide.sql"
    wide.write_text("CREATE TABLE wide (" + ", ".join(
        f"column_number_{i} VARCHAR(200) NOT NULL" for i in range(5000)) + ");\n")
    manifest = load_manifest(wide)
    assert manifest.warnings == () and len(manifest.models[0].columns) == 5000
    deep = tmp_path / "deep.sql"
    deep.write_text("CREATE VIEW v AS SELECT " + "(" * 300 + "1" + ")" * 300 + ";\n"
                    "CREATE TABLE t (a INT);\n")
    manifest = load_manifest(deep)
    assert [m.name for m in manifest.models] == ["t"] and manifest.views == ()
    [warning] = manifest.warnings
    assert warning.startswith("line 1: statement skipped, the SQL is nested too deep")


def test_ddl_sqlglot_reads_only_in_its_own_dialect_is_read_in_that_dialect(
        tmp_path: Path) -> None:
    # mysqldump's ENGINE=… and T-SQL's [dbo].[t] are Commands or errors to sqlglot's own
    # dialect; the dialect that reads the file becomes the manifest's
    mysql = tmp_path / "dump.sql"
    mysql.write_text("""-- MySQL dump 10.13
/*!40101 SET NAMES utf8mb4 */;
DROP TABLE IF EXISTS `customers`;
CREATE TABLE `customers` (
  `id` int NOT NULL AUTO_INCREMENT,
  `name` varchar(100) NOT NULL COMMENT 'full name',
  PRIMARY KEY (`id`)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COMMENT='People who buy';
CREATE TABLE `orders` (
  `id` int NOT NULL AUTO_INCREMENT,
  `customer_id` int NOT NULL,
  KEY `idx_customer` (`customer_id`),
  CONSTRAINT `fk_customer` FOREIGN KEY (`customer_id`) REFERENCES `customers` (`id`)
) ENGINE=InnoDB AUTO_INCREMENT=5 DEFAULT CHARSET=utf8mb4;
LOCK TABLES `orders` WRITE;
INSERT INTO `orders` VALUES (1,1);
""")
    manifest = load_manifest(mysql)
    assert manifest.warnings == () and manifest.dialect == "mysql"
    customers = manifest.model("customers")
    assert customers is not None and customers.description == "People who buy"
    assert [(c.name, c.description) for c in customers.columns] == [("id", ""),
                                                                     ("name", "full name")]
    assert [(r.left, r.right) for r in manifest.relationships] == [("orders", "customers")]
    tsql = tmp_path / "tsql.sql"
    tsql.write_text("CREATE TABLE [dbo].[Orders] ([Id] INT IDENTITY(1,1) NOT NULL, "
                    "[Total] MONEY NULL, CONSTRAINT [PK_Orders] PRIMARY KEY CLUSTERED "
                    "([Id] ASC))\nGO\n")
    orders = load_manifest(tsql).model("Orders")
    assert orders is not None and orders.primary_key == ("Id",)
    assert [c.name for c in orders.columns] == ["Id", "Total"]


def test_ephemeral_and_disabled_dbt_models_are_no_tables(tmp_path: Path) -> None:
    document = json.loads(DBT.read_text())
    document["nodes"]["model.jaffle_shop.stg_payments"]["config"]["materialized"] = \
        "ephemeral"
    document["nodes"]["model.jaffle_shop.stg_orders"]["config"]["enabled"] = False
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(document))
    manifest = load_manifest(path)
    names = [m.name for m in manifest.models]
    assert "stg_payments" not in names and "stg_orders" not in names
    assert "stg_customers" in names and manifest.warnings == ()


def test_a_dbt_manifest_with_wrong_types_is_read_without_a_crash(tmp_path: Path) -> None:
    # values of the wrong type where dbt writes lists and objects (a hand edit, another
    # tool's output) are skipped, the rest is read
    document = json.loads(DBT.read_text())
    test = document["nodes"]["test.jaffle_shop.not_null_orders_order_id.cf6c17daed"]
    test["attached_node"] = None
    test["depends_on"] = {"nodes": [["model.jaffle_shop.orders"], 7]}
    document["nodes"]["model.jaffle_shop.orders"]["columns"]["status"] = "not an object"
    document["nodes"]["model.jaffle_shop.customers"]["constraints"] = 3
    document["semantic_models"] = {"semantic_model.p.s": {
        "name": "s", "model": "ref('orders')", "entities": 5, "measures": "m",
        "dimensions": [None, {"name": "d", "type": "time", "type_params": []}]}}
    document["metrics"] = {"metric.p.m": {"name": "m", "type_params": {"metrics": 4}},
                           "metric.p.n": ["not", "an", "object"]}
    document["sources"] = []
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(document))
    manifest = load_manifest(path)
    assert len(manifest.models) == 8
    assert "'sources' ignored, expected an object, got list" in manifest.warnings
    [cube] = manifest.cubes
    assert [d.name for d in cube.time_dimensions] == ["d"] and cube.measures == ()


def test_the_mcp_server_answers_from_a_database_and_checks_names_against_it(
        tmp_path: Path, project: Path) -> None:
    # an agent's loop over MCP (the SDK's own client) with a SQLite file as the schema
    pytest.importorskip("mcp")
    import asyncio
    import sys

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    from tests.conftest import REPO

    source_project(project, "sqlite")

    async def main() -> tuple[str, str, bool]:
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "wrenmem", "--project", str(project), "mcp", "--backend", "grep"],
            env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=str(project))
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                context = await session.call_tool("get_schema_context",
                                                  {"question": "songs of singers"})
                typo = await session.call_tool("store_query", {
                    "question": "Songs per singer", "sql": 'SELECT "Song_Nme" FROM singer'})
                assert context.structured_content is not None
                return (context.structured_content["text"],
                        " ".join(getattr(c, "text", "") for c in typo.content), typo.is_error)

    text, refused, is_error = asyncio.run(asyncio.wait_for(main(), timeout=300))
    assert "Read from a SQLite database" in text and "Song_Name (TEXT)" in text
    assert is_error and "did you mean 'song_name'" in refused.lower()
    assert list((project / "knowledge" / "sql").iterdir()) == []
