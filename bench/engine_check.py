"""False errors and catch rate of the SQL checks (parse, names, DuckDB binding).

Every gold SQL of BIRD mini-dev (SQLite, PostgreSQL and MySQL versions of 500 questions)
and of Spider-Syn train (SQLite) is checked as ``wrenmem validate`` checks a pair, against a
manifest built from its database's schema (``dev_tables.json``, ``spider-tables/tables.json``:
tables, typed columns, primary keys, foreign keys as relationships). Gold SQL runs on its
database, so every error is a false error (target: 0). Then faults are made from the same
SQL with sqlglot and checked the same way:

- missing GROUP BY: a grouped query with a plain column in its SELECT loses its GROUP BY;
- aggregate of text: ``SUM``/``AVG`` of a column becomes ``SUM``/``AVG`` of a text column;
- ambiguous column: a column that two joined tables both have is added, unqualified;
- wrong join key type: one side of a join key becomes a text column of that table, the
  other side being numeric.

A fault is "caught" when the check reports an error (WM002-WM009) and "noted" when it reports
only a WM010 note (the dialect itself accepts it: SQLite and MySQL are lenient).

    python bench/engine_check.py [--limit N] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from _data import DATA

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from wrenmem.checks.validate import Validator  # noqa: E402
from wrenmem.schema.manifest import Manifest, parse_manifest  # noqa: E402
from wrenmem.settings import load_settings  # noqa: E402

BIRD = DATA / "bird-minidev"
SPIDER_SYN = DATA / "spider-syn-train" / "questions.json"
SPIDER_TABLES = DATA / "spider-tables" / "tables.json"
TYPES = {"integer": "INTEGER", "text": "VARCHAR", "real": "DOUBLE", "date": "DATE",
         "datetime": "TIMESTAMP", "number": "DECIMAL", "time": "TIMESTAMP",
         "boolean": "BOOLEAN", "others": "VARCHAR"}
SOURCES = {"sqlite": "sqlite", "postgres": "postgres", "mysql": "mysql"}
FAULTS = ("missing GROUP BY", "aggregate of text", "ambiguous column", "wrong join key type")


def manifest_of(db: dict[str, Any], source: str) -> Manifest:
    """An MDL manifest of one Spider/BIRD schema: a model per table, typed columns, primary
    keys, and a relationship per foreign key."""
    tables = db["table_names_original"]
    columns: dict[int, list[dict[str, Any]]] = defaultdict(list)
    pks = {p for p in _flat(db.get("primary_keys", []))}
    for n, (table, name) in enumerate(db["column_names_original"]):
        if table < 0:
            continue
        columns[table].append({"name": name, "type": TYPES.get(db["column_types"][n], "VARCHAR"),
                               "isPrimaryKey": n in pks})
    models = [{"name": t, "columns": columns[i],
               "primaryKey": next((c["name"] for c in columns[i] if c["isPrimaryKey"]), "")}
              for i, t in enumerate(tables)]
    relationships = []
    for k, (a, b) in enumerate(db.get("foreign_keys", [])):
        ta, ca = db["column_names_original"][a]
        tb, cb = db["column_names_original"][b]
        if ta == tb:
            continue
        relationships.append({"name": f"fk{k}", "models": [tables[ta], tables[tb]],
                              "joinType": "MANY_TO_ONE",
                              "condition": f'"{tables[ta]}"."{ca}" = "{tables[tb]}"."{cb}"'})
    return parse_manifest({"catalog": "bench", "schema": "main", "dataSource": source,
                           "models": models, "relationships": relationships})


def _flat(items: list[Any]) -> list[int]:
    out: list[int] = []
    for item in items:
        out += _flat(item) if isinstance(item, list) else [item]
    return out


class Checker:
    """A validator per database, as ``wrenmem validate`` runs it on a pair."""

    def __init__(self, schemas: dict[str, dict[str, Any]], source: str):
        self.schemas = schemas
        self.source = source
        self.root = Path(tempfile.mkdtemp(prefix="wrenmem-engine-bench-"))
        self.settings = load_settings(self.root, {"engine": "duckdb"}, environ={})
        self.validators: dict[str, Validator] = {}

    def validator(self, db_id: str) -> Validator:
        if db_id not in self.validators:
            manifest = manifest_of(self.schemas[db_id], self.source)
            v = Validator(self.settings, tables=manifest.table_columns(),
                          manifest_dialect=manifest.dialect, manifest=manifest)
            v._loaded = True
            self.validators[db_id] = v
        return self.validators[db_id]

    def findings(self, db_id: str, sql: str, dialect: str) -> list[tuple[str, str, str]]:
        """(code, kind, message) of each finding."""
        from wrenmem.checks.validate import Problem

        out = []
        for kind, p in self.validator(db_id).sql_findings(sql, dialect):
            code = Problem("", 1, 1, p.message, kind).code
            out.append((code, kind, p.message))
        return out


def faults(sql: str, dialect: str, manifest: Manifest) -> list[tuple[str, str]]:
    """(fault kind, faulty SQL) made from ``sql``: at most one of each kind."""
    import sqlglot
    from sqlglot import exp

    try:
        tree = sqlglot.parse_one(sql, read=dialect)
    except Exception:
        return []
    text_cols = {m.name.lower(): [c.name for c in m.columns if c.type == "VARCHAR"]
                 for m in manifest.models}
    num_cols = {m.name.lower(): {c.name.lower() for c in m.columns
                                 if c.type in ("INTEGER", "DECIMAL", "DOUBLE")}
                for m in manifest.models}
    all_cols = {m.name.lower(): {c.name.lower() for c in m.columns} for m in manifest.models}
    aliases = {(t.alias_or_name or t.name).lower(): t.name.lower()
               for t in tree.find_all(exp.Table)}
    out: list[tuple[str, str]] = []
    select = tree if isinstance(tree, exp.Select) else None
    # missing GROUP BY
    if select is not None and select.args.get("group") and any(
            isinstance(e.unalias(), exp.Column) for e in select.expressions) and any(
            e.find(exp.AggFunc) for e in select.expressions):
        broken = select.copy()
        broken.set("group", None)
        broken.set("having", None)
        out.append((FAULTS[0], broken.sql(dialect)))
    # aggregate of text
    for agg in tree.find_all(exp.Sum, exp.Avg):
        column = agg.this if isinstance(agg.this, exp.Column) else None
        if column is None:
            continue
        table = aliases.get(column.table.lower()) if column.table else (
            next(iter(aliases.values()), None) if len(aliases) == 1 else None)
        texts = text_cols.get(table or "", [])
        if not texts:
            continue
        broken = tree.copy()
        target = next(a for a in broken.find_all(exp.Sum, exp.Avg) if a.sql() == agg.sql())
        target.set("this", exp.Column(this=exp.to_identifier(texts[0], quoted=True),
                                      table=exp.to_identifier(column.table) if column.table
                                      else None))
        out.append((FAULTS[1], broken.sql(dialect)))
        break
    # ambiguous column and wrong join key type
    if select is not None and select.args.get("joins"):
        direct = [select.args.get("from") or select.args.get("from_"), *select.args["joins"]]
        tables = [d.this for d in direct if d is not None and isinstance(d.this, exp.Table)
                  and d.this.name.lower() in all_cols]
        for i, a in enumerate(tables):
            shared = next((c for b in tables[i + 1:] for c in sorted(all_cols[a.name.lower()]
                           & all_cols[b.name.lower()]) if b.name.lower() != a.name.lower()),
                          None)
            if shared:
                broken = select.copy()
                broken.set("expressions", [*broken.expressions,
                                           exp.column(shared, quoted=True)])
                out.append((FAULTS[2], broken.sql(dialect)))
                break
        for join in select.args["joins"]:
            on = join.args.get("on")
            if not isinstance(on, exp.EQ):
                continue
            left, right = on.this, on.expression
            if not (isinstance(left, exp.Column) and isinstance(right, exp.Column)):
                continue
            lt = aliases.get(left.table.lower()) if left.table else None
            rt = aliases.get(right.table.lower()) if right.table else None
            if not lt or not rt or left.name.lower() not in num_cols.get(lt, set()):
                continue
            texts = text_cols.get(rt, [])
            if not texts:
                continue
            broken = select.copy()
            key = next(c for c in broken.find_all(exp.Column) if c.sql() == right.sql()
                       and isinstance(c.parent, exp.EQ))
            key.replace(exp.Column(this=exp.to_identifier(texts[0], quoted=True),
                                   table=exp.to_identifier(right.table)))
            out.append((FAULTS[3], broken.sql(dialect)))
            break
    return out


def _note_kind(message: str) -> str:
    """A note's reason in a few words (what the dialect allows, or why not checked)."""
    import re

    if message.startswith("not checked by the engine"):
        found = re.search(r"(sqlglot cannot \w+|DuckDB cannot bind|sqlglot failed)", message)
        return "not checked: " + (found.group(1) if found else message[:40])
    return re.split(r"[:,]", message, maxsplit=1)[0]


def load_sets(limit: int | None) -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    """(name, dialect, schema file, [(db_id, sql)])."""
    sets = []
    for name, dialect in (("BIRD mini-dev SQLite", "sqlite"),
                          ("BIRD mini-dev PostgreSQL", "postgres"),
                          ("BIRD mini-dev MySQL", "mysql")):
        suffix = {"sqlite": "sqlite", "postgres": "postgresql", "mysql": "mysql"}[dialect]
        items = json.loads((BIRD / f"mini_dev_{suffix}.json").read_text(encoding="utf-8"))
        sqls = list(dict.fromkeys((i["db_id"], i["SQL"].strip()) for i in items))
        sets.append((name, dialect, str(BIRD / "dev_tables.json"), sqls[:limit]))
    items = json.loads(SPIDER_SYN.read_text(encoding="utf-8"))
    sqls = list(dict.fromkeys((i["db_id"], i["query"].strip()) for i in items))
    sets.append(("Spider-Syn train", "sqlite", str(SPIDER_TABLES), sqls[:limit]))
    return sets


def run(limit: int | None) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for name, dialect, schema_file, sqls in load_sets(limit):
        schemas = {d["db_id"]: d for d in json.loads(Path(schema_file).read_text())}
        checker = Checker(schemas, SOURCES[dialect])
        started = time.perf_counter()
        codes: Counter[str] = Counter()
        notes: Counter[str] = Counter()
        false_errors: list[dict[str, str]] = []
        caught: Counter[str] = Counter()
        noted: Counter[str] = Counter()
        made: Counter[str] = Counter()
        missed: dict[str, list[str]] = defaultdict(list)
        for db_id, sql in sqls:
            found = checker.findings(db_id, sql, dialect)
            codes.update(c for c, _k, _m in found)
            notes.update(_note_kind(m) for c, _k, m in found if c == "WM010")
            errors = [(c, m) for c, k, m in found if c != "WM010"]
            if errors:
                false_errors.append({"db": db_id, "sql": sql, "code": errors[0][0],
                                     "message": errors[0][1]})
            manifest = checker.validator(db_id).manifest
            assert manifest is not None
            for kind, broken in faults(sql, dialect, manifest):
                made[kind] += 1
                result = checker.findings(db_id, broken, dialect)
                if any(c != "WM010" for c, _k, _m in result):
                    caught[kind] += 1
                elif result:
                    noted[kind] += 1
                else:
                    missed[kind].append(broken)
        seconds = time.perf_counter() - started
        report[name] = {
            "dialect": dialect, "sqls": len(sqls), "false_errors": len(false_errors),
            "notes": codes.get("WM010", 0), "codes": dict(codes),
            "note_kinds": dict(notes.most_common()),
            "seconds": round(seconds, 1),
            "faults": {k: {"made": made[k], "caught": caught[k], "noted": noted[k],
                           "missed": made[k] - caught[k] - noted[k]} for k in FAULTS},
            "false_error_examples": false_errors[:10],
            "missed_examples": {k: v[:3] for k, v in missed.items()},
        }
        print(f"{name}: {len(sqls)} SQL, {len(false_errors)} false errors, "
              f"{codes.get('WM010', 0)} notes, {seconds:.1f} s", file=sys.stderr)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, help="at most this many SQLs per set")
    parser.add_argument("--json", type=Path, help="write the full report here")
    args = parser.parse_args()
    report = run(args.limit)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    print("| set | SQL | false errors | notes (WM010) | " + " | ".join(
        f"{k}: caught / noted / made" for k in FAULTS) + " |")
    print("|---|---:|---:|---:|" + "---:|" * len(FAULTS))
    for name, r in report.items():
        cells = [f"{f['caught']} / {f['noted']} / {f['made']}" for f in r["faults"].values()]
        print(f"| {name} ({r['dialect']}) | {r['sqls']} | {r['false_errors']} | {r['notes']} | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
