"""SQL dialects and validation on BIRD mini-dev: the same 500 questions with SQL written for
SQLite, PostgreSQL and MySQL.

Reports (Markdown on stdout):
1. how many SQLs fail `check_sql` in their own dialect (should be 0) and how many fail when
   read as each other dialect — what a wrong `dialect:` in a pair file would cost;
2. the table/column check against each database's schema (`dev_tables.json`): false alarms on
   the real SQL, and how many one-column typos it catches;
3. time per SQL.

    python bench/dialects.py [--data DIR] [--dialects sqlite,postgres,mysql,duckdb,...]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _data import DATA

from wrenmem.checks.references import Schema, check_schema
from wrenmem.sql.check import check_sql

DEFAULT_DATA = DATA / "bird-minidev"
FILES = {"sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql"}


def load(data: Path) -> dict[str, list[dict]]:
    return {dialect: json.loads((data / f"mini_dev_{name}.json").read_text())
            for name, dialect in FILES.items()}


def schemas(data: Path) -> dict[str, Schema]:
    out = {}
    for db in json.loads((data / "dev_tables.json").read_text()):
        tables: dict[str, dict[str, str]] = {t: {} for t in db["table_names_original"]}
        for index, column in db["column_names_original"]:
            if index >= 0:
                tables[db["table_names_original"][index]][column] = "TEXT"
        out[db["db_id"]] = Schema(tables)
    return out


def typo(sql: str, dialect: str, schema: Schema, rng: random.Random) -> str | None:
    """The SQL with one column reference of a schema column misspelled (its last letter
    doubled, at the place the parser found it), or None when it has none."""
    import sqlglot
    from sqlglot import exp

    tree = sqlglot.parse_one(sql, read=dialect)
    columns = {c for cols in schema.known.values() for c in cols}
    spots = sorted({(node.this.meta["start"], node.this.meta["end"])
                    for node in tree.find_all(exp.Column)
                    if node.name.lower() in columns and "start" in node.this.meta
                    and not node.this.quoted})
    if not spots:
        return None
    start, end = rng.choice(spots)
    return sql[: end + 1] + sql[end] + sql[end + 1:]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--dialects", default="sqlite,postgres,mysql,duckdb,bigquery,"
                        "snowflake,tsql,oracle")
    args = parser.parse_args()
    readers = args.dialects.split(",")
    sets = load(args.data)
    total = sum(len(items) for items in sets.values())

    print("### Own dialect and cross-dialect reads\n")
    print("Failing `check_sql` (of 500) when the SQL written for the row's database is read as "
          "the column's dialect:\n")
    print("| written for | " + " | ".join(readers) + " |")
    print("|---|" + "---|" * len(readers))
    started = time.perf_counter()
    checked = 0
    own_failures = 0
    for written, items in sets.items():
        cells = []
        for reader in readers:
            failed = sum(1 for item in items if check_sql(item["SQL"], reader))
            checked += len(items)
            if reader == written:
                own_failures += failed
                cells.append(f"**{failed}**")
            else:
                cells.append(str(failed))
        print(f"| {written} | " + " | ".join(cells) + " |")
    per_sql = (time.perf_counter() - started) / checked * 1000
    print(f"\nOwn dialect: {total - own_failures} of {total} validate. "
          f"`check_sql`: {per_sql:.2f} ms per SQL.\n")

    print("### Tables and columns against each database's schema\n")
    tables = schemas(args.data)
    rng = random.Random(7)
    started = time.perf_counter()
    false_alarms = caught = typos = 0
    for dialect, items in sets.items():
        for item in items:
            schema = tables[item["db_id"]]
            if check_schema(item["SQL"], dialect, schema):
                false_alarms += 1
            wrong = typo(item["SQL"], dialect, schema, rng)
            if wrong is not None:
                typos += 1
                caught += bool(check_schema(wrong, dialect, schema))
    per_sql = (time.perf_counter() - started) / (total + typos) * 1000
    print("| real SQL flagged (false alarms) | one-column typos caught | ms per SQL |")
    print("|---|---|---|")
    print(f"| {false_alarms} of {total} | {caught} of {typos} | {per_sql:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
