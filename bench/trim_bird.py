"""Write the trimmed BIRD mini-dev that the tests use (``tests/fixtures/bird-minidev/``).

From the full set in ``$WRENMEM_BENCH_DATA/bird-minidev`` it keeps what the tests read:
each question's id, database and SQL in the three dialects (no question text, evidence or
difficulty), and the table and column names of the 11 databases.

    python bench/trim_bird.py [--data DIR] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from _data import DATA, REPO

# file suffix in mini-dev -> sqlglot dialect name
FILES = {"sqlite": "sqlite", "postgresql": "postgres", "mysql": "mysql"}


def questions(data: Path) -> list[dict]:
    """One row per question, in the source's order: question_id, db_id, {dialect: SQL}.

    The three files list the same 500 rows in the same order (questions 137 and 138 appear
    twice, identical both times: kept, as in the source)."""
    sets = [json.loads((data / f"mini_dev_{name}.json").read_text(encoding="utf-8"))
            for name in FILES]
    rows = []
    for items in zip(*sets, strict=True):
        first = items[0]
        if any((i["question_id"], i["db_id"]) != (first["question_id"], first["db_id"])
               for i in items):
            raise SystemExit(f"row {len(rows)}: the dialect files disagree on the question")
        rows.append({"question_id": first["question_id"], "db_id": first["db_id"],
                     "sql": {dialect: i["SQL"] for dialect, i in zip(FILES.values(), items,
                                                                      strict=True)}})
    return rows


def schemas(data: Path) -> dict[str, dict[str, list[str]]]:
    """{db_id: {table: [column, ...]}} with the original names, in their original order."""
    out = {}
    for db in json.loads((data / "dev_tables.json").read_text(encoding="utf-8")):
        tables: dict[str, list[str]] = {t: [] for t in db["table_names_original"]}
        for index, column in db["column_names_original"]:
            if index >= 0:
                tables[db["table_names_original"][index]].append(column)
        out[db["db_id"]] = tables
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA / "bird-minidev")
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "bird-minidev")
    args = parser.parse_args(argv)
    rows = questions(args.data)
    used = {row["db_id"] for row in rows}
    tables = {db: t for db, t in schemas(args.data).items() if db in used}
    args.out.mkdir(parents=True, exist_ok=True)
    # one question per line: small diffs if the source ever changes
    lines = ",\n".join(json.dumps(row, ensure_ascii=False) for row in rows)
    (args.out / "questions.json").write_text(f"[\n{lines}\n]\n", encoding="utf-8")
    (args.out / "schemas.json").write_text(
        json.dumps(tables, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for name in ("questions.json", "schemas.json"):
        print(f"{args.out / name}: {(args.out / name).stat().st_size / 1000:.0f} kB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
