"""Build a large, realistic Wren MDL manifest from the Spider schemas.

Spider has 156 databases, 843 tables and 4,485 columns. A data warehouse of the size the
reference struggles with (#2756: 2,730 models, 44,439 schema items) has wider tables and
regional copies, so each Spider table becomes ``--copies`` models (``<db>__<table>``, then
``eu__<db>__<table>``, ``apac__…``), each with its Spider columns (descriptions from Spider's
natural-language column names), rolling-window variants of its numeric measures, and the
audit columns every warehouse table carries. Foreign keys become relationships.

    python bench/gen_manifest.py OUT.json [--copies 3] [--tables PATH] [--databases N]

``--databases N`` keeps the first N Spider databases (a smaller manifest: 80 databases and
one copy make 9,929 items).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from _data import DATA

DEFAULT_TABLES = DATA / "spider-tables" / "tables.json"
REGIONS = ["", "eu", "apac", "latam", "mea"]
TYPES = {"text": "VARCHAR", "number": "DECIMAL", "time": "TIMESTAMP", "boolean": "BOOLEAN",
         "others": "VARCHAR"}
AUDIT_COLUMNS = [
    ("created_at", "TIMESTAMP", "When the row was first loaded into the warehouse."),
    ("updated_at", "TIMESTAMP", "When the row was last changed in the warehouse."),
    ("valid_from", "TIMESTAMP", "Start of the validity interval of this version of the row."),
    ("valid_to", "TIMESTAMP", "End of the validity interval; NULL for the current version."),
    ("is_current", "BOOLEAN", "True for the current version of the row."),
    ("is_deleted", "BOOLEAN", "True when the row was deleted in the source system."),
    ("source_system", "VARCHAR", "Name of the operational system the row came from."),
    ("etl_batch_id", "BIGINT", "Load batch that wrote the row."),
    ("row_hash", "VARCHAR", "Hash of the business columns, for change detection."),
    ("data_owner", "VARCHAR", "Team accountable for the quality of the row."),
    ("region_code", "VARCHAR", "Sales region the row belongs to."),
    ("ingest_lag_seconds", "INTEGER", "Seconds between the source change and the load."),
]
WINDOWS = [("7d_avg", "average over the last 7 days"),
           ("30d_avg", "average over the last 30 days"),
           ("prev_year", "value one year earlier")]


def snake(name: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower() or "x"


def build(tables_path: Path, copies: int, databases: int | None = None) -> dict[str, Any]:
    """The manifest of ``copies`` regional copies of the first ``databases`` (all: None)."""
    spider = json.loads(tables_path.read_text(encoding="utf-8"))[:databases]
    models: list[dict[str, Any]] = []
    relationships: list[dict[str, Any]] = []
    for region in REGIONS[:copies]:
        prefix = f"{region}__" if region else ""
        where = f" ({region.upper()} region copy)" if region else ""
        for db in spider:
            tables = db["table_names_original"]
            names = [f"{prefix}{snake(db['db_id'])}__{snake(t)}" for t in tables]
            pks = set(db["primary_keys"])
            fk_columns = {c for pair in db["foreign_keys"] for c in pair}
            columns: list[list[dict[str, Any]]] = [[] for _ in tables]
            for index, ((table, original), (_t, natural), kind) in enumerate(zip(
                    db["column_names_original"], db["column_names"], db["column_types"],
                    strict=True)):
                if table < 0:
                    continue
                is_key = index in pks or index in fk_columns or natural.endswith(" id")
                column: dict[str, Any] = {
                    "name": original, "type": "INTEGER" if is_key and kind == "number"
                    else TYPES.get(kind, "VARCHAR"),
                    "notNull": index in pks,
                    "properties": {"description": f"The {natural} of the "
                                                  f"{db['table_names'][table]}."}}
                if index in pks:
                    column["isPrimaryKey"] = True
                columns[table].append(column)
                if kind == "number" and not is_key:
                    for suffix, text in WINDOWS:
                        columns[table].append({
                            "name": f"{snake(original)}_{suffix}", "type": "DECIMAL",
                            "isCalculated": True,
                            "expression": f"window_{suffix}({original!r})",
                            "properties": {"description": f"{natural.capitalize()}: {text}."}})
            for t, name in enumerate(names):
                cols = columns[t] + [{"name": n, "type": ty, "properties": {"description": d}}
                                     for n, ty, d in AUDIT_COLUMNS]
                pk = [c["name"] for c in columns[t] if c.get("isPrimaryKey")]
                model: dict[str, Any] = {
                    "name": name, "columns": cols,
                    "tableReference": {"schema": snake(db["db_id"]), "table": tables[t]},
                    "properties": {"description": f"{db['table_names'][t].capitalize()} "
                                                  f"records of the {db['db_id'].replace('_', ' ')}"
                                                  f" database{where}."}}
                if pk:
                    model["primaryKey"] = pk[0] if len(pk) == 1 else pk
                models.append(model)
            original_cols = db["column_names_original"]
            for n, (a, b) in enumerate(db["foreign_keys"]):
                ta, ca = original_cols[a]
                tb, cb = original_cols[b]
                if ta == tb:
                    continue
                relationships.append({
                    "name": f"{prefix}{snake(db['db_id'])}__fk{n}",
                    "models": [names[ta], names[tb]], "joinType": "MANY_TO_ONE",
                    "condition": f'"{names[ta]}"."{ca}" = "{names[tb]}"."{cb}"'})
    return {"catalog": "warehouse", "schema": "spider", "dataSource": "postgres",
            "models": models, "relationships": relationships, "views": [], "cubes": []}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--copies", type=int, default=3, choices=range(1, len(REGIONS) + 1))
    parser.add_argument("--tables", type=Path, default=DEFAULT_TABLES)
    parser.add_argument("--databases", type=int, help="keep the first N Spider databases")
    args = parser.parse_args(argv)
    manifest = build(args.tables, args.copies, args.databases)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    n_columns = sum(len(m["columns"]) for m in manifest["models"])
    print(f"{args.out}: {len(manifest['models'])} models, {n_columns} columns, "
          f"{len(manifest['relationships'])} relationships, "
          f"{args.out.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
