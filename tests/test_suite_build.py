"""The public recall suite (bench/suite): built from a fixture-sized copy of Spider-Syn train,
its splits, tasks and relevance labels are checked against the SQL keys recomputed here, and
the runner scores a case through the product's grep backend."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import FIXTURES, REPO

sys.path.insert(0, str(REPO / "bench" / "suite"))
sys.path.insert(0, str(REPO / "bench"))
import build  # noqa: E402
import run  # noqa: E402
from sqlnorm import keys  # noqa: E402

DATA = FIXTURES / "suite"
SETS = ["spider-en", "spider-syn", "spider-keyword", "mspider-zh"]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("suite")
    build.build(DATA, out, sets=SETS)
    return out


def _load(suite: Path, name: str) -> tuple[dict[str, dict], list[dict]]:
    items = {}
    for line in (suite / name / "items.jsonl").read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        items[item["id"]] = item
    return items, json.loads((suite / name / "cases.json").read_text(encoding="utf-8"))


def _keys(item: dict) -> tuple[str, str, str]:
    return keys(item["sql"], "sqlite", spider=True)


def test_absent_data_is_skipped_and_the_rest_is_built(suite: Path) -> None:
    manifest = json.loads((suite / "manifest.json").read_text())
    assert manifest["skipped"] == ["mspider-zh"]
    assert sorted(manifest["sets"]) == ["spider-en", "spider-keyword", "spider-syn"]
    tasks = {c["name"].split("/")[1] for s in manifest["sets"].values() for c in s["cases"]}
    assert {"answered-one", "answered-all", "new", "new-values", "trap"} <= tasks


def test_splits_are_by_database(suite: Path) -> None:
    split_of_db: dict[str, str] = {}
    for name in ("spider-en", "spider-syn", "spider-keyword"):
        items, cases = _load(suite, name)
        assert {c["split"] for c in cases} == {"tuning", "held-out"}
        for case in cases:
            dbs = {items[i]["db"] for i in case["stored"]} | {a["db"] for a in case["asked"]}
            for db in dbs:
                assert build.split_of(db) == case["split"]
                assert split_of_db.setdefault(db, case["split"]) == case["split"]
    assert set(split_of_db.values()) == {"tuning", "held-out"}


def test_relevance_labels(suite: Path) -> None:
    checked = {"answered": 0, "new": 0, "trap": 0}
    for name in ("spider-en", "spider-syn", "spider-keyword"):
        items, cases = _load(suite, name)
        for case in cases:
            stored = [items[i] for i in case["stored"]]
            assert len({i["id"] for i in stored}) == len(stored)
            for a in case["asked"]:
                sql = a.get("sql") or items[a["item"]]["sql"]
                same, skel, _shape = keys(sql, "sqlite", spider=True)
                excluded = set(a.get("exclude", ()))
                on_db = [s for s in stored if s["db"] == a["db"] and s["id"] not in excluded]
                if case["task"] == "new":
                    # the asked SQL is stored nowhere (not even as an excluded item)
                    assert all(_keys(s)[0] != same for s in stored if s["db"] == a["db"])
                    level = 2 if case["variant"] in ("new-tables", "siblings-new") else 1
                    want = {s["id"] for s in on_db if _keys(s)[level] == _keys_of(sql, level)}
                else:
                    want = {s["id"] for s in on_db if _keys(s)[0] == same}
                assert set(a["relevant"]) == want and want, (case["name"], a)
                assert a["item"] not in a["relevant"]
                if case["variant"].startswith("siblings"):
                    # decisive-word siblings: stored, most words shared, another SQL
                    # (of another shape for a new question)
                    assert a["traps"]
                    words = _word_set(a["question"])
                    for t in a["traps"]:
                        trap = items[t]
                        assert t in case["stored"] and _keys(trap)[0] != same
                        shared = words & _word_set(trap["question"])
                        assert len(shared) / len(words | _word_set(trap["question"])) >= 0.6
                        if case["task"] == "new":
                            assert _keys(trap)[2] != _keys_of(sql, 2)
                    checked["siblings"] = checked.get("siblings", 0) + 1
                if case["task"] == "trap":
                    assert a["traps"]
                    for t in a["traps"]:
                        trap = items[t]
                        assert t in case["stored"] and _keys(trap)[0] != same
                checked[case["task"]] += 1
    assert all(checked.values()) and checked.get("siblings"), checked


def _word_set(text: str) -> set[str]:
    import re

    return {w.lower() for w in re.findall(r"\w+", text)}


def _keys_of(sql: str, level: int) -> str:
    return keys(sql, "sqlite", spider=True)[level]


def test_new_values_question_states_another_value(suite: Path) -> None:
    items, cases = _load(suite, "spider-en")
    case = next(c for c in cases if c["variant"] == "new-values")
    for a in case["asked"]:
        source = items[a["item"].removesuffix("-value")]
        assert a["question"] != source["question"]
        assert _keys(source)[1] == _keys_of(a["sql"], 1)  # same skeleton, other values
        assert source["id"] in a["exclude"]


def test_the_build_is_deterministic(suite: Path, tmp_path: Path) -> None:
    again = tmp_path / "again"
    build.build(DATA, again, sets=SETS)
    for path in sorted(suite.rglob("*")):
        if path.is_file():
            assert (again / path.relative_to(suite)).read_bytes() == path.read_bytes(), path
    manifest = json.loads((again / "manifest.json").read_text())
    import hashlib

    for name, info in manifest["sets"].items():
        digest = hashlib.sha256((again / name / "cases.json").read_bytes()).hexdigest()
        assert info["cases_sha256"] == digest


def test_answer_ranks_collapse_equal_sql_and_drop_excluded() -> None:
    items = {i: {"id": i, "db": "d", "same": s} for i, s in
             [("a", "x"), ("b", "x"), ("c", "y"), ("own", "z"), ("t", "w")]}
    asked = {"relevant": ["c"], "exclude": ["own"], "traps": ["t"]}
    # own is dropped, a and b are one answer: c is the second distinct answer
    assert run.answer_ranks(["own", "a", "b", "c"], asked, items) == (2, False)
    assert run.answer_ranks(["t", "c"], asked, items) == (2, True)
    assert run.answer_ranks(["a", "t"], asked, items) == (None, False)
    low, high = run.wilson(8, 10)
    assert low < 0.8 < high and 0 <= low and high <= 1


def test_runner_scores_a_case_through_the_product(suite: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    log = (REPO / "bench" / "suite" / "HELD-OUT-LOG.md").read_text()
    assert run.main(["--suite", str(suite), "--split", "tuning", "--runs", "grep",
                     "--sets", "spider-en", "--cases", "answered-all",
                     "--workdir", str(tmp_path / "work"), "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    (case,) = result["cases"]
    metrics = case["runs"]["grep"]
    assert metrics["n"] == case["asked"] == len(metrics["ranks"]) > 0
    assert 0.3 < metrics["R@1"] <= metrics["R@5"] <= 1.0  # grep finds most paraphrases
    assert "spider-en" in capsys.readouterr().out
    assert (REPO / "bench" / "suite" / "HELD-OUT-LOG.md").read_text() == log  # tuning: no line
    capsys.readouterr()
    assert run.main(["--report", str(out), "--markdown"]) == 0
    report = capsys.readouterr().out
    assert "| spider-en/answered-all/tuning |" in report
    assert f"| spider-en | 1 | {metrics['R@1']:.3f} |" in report


def test_held_out_needs_a_reason(suite: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        run.main(["--suite", str(suite), "--split", "held-out", "--runs", "grep",
                  "--workdir", str(tmp_path)])


def test_paired_counts_only_the_questions_the_runs_disagree_on() -> None:
    # ranks of the same five questions under two runs (None: not found)
    won, lost, p = run.paired([1, 1, 2, None, 1], [1, 3, 1, 1, None])
    assert (won, lost) == (2, 2) and p == 1.0
    won, lost, p = run.paired([1] * 8, [2] * 8)
    assert (won, lost) == (8, 0)
    assert p == pytest.approx(2 / 2 ** 8)  # eight of eight one way: 2 x (1/2)^8
    assert run.paired([1, 2], [1]) == (0, 0, None)  # not the same questions


def _write_ko_part(folder: Path, rows: list[dict], tables: list[dict], refined: list[dict],
                   names: tuple[str, str, str]) -> None:
    for name, records in zip(names, (rows, tables, refined), strict=True):
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                        encoding="utf-8")


def test_the_fresh_korean_set_is_held_out_only(tmp_path: Path) -> None:
    import sources

    folder = tmp_path / "extra" / "ko-wikisql" / "outputs"
    for part, (table, first) in zip(sources.KO_WIKISQL_FRESH,
                                    (("1-100-1", "가"), ("2-200-2", "나")), strict=True):
        header = ["선수", "번호", "학교"]
        rows = [{"table_id": table, "question": f"{first} {n}번 선수는 어느 학교?",
                 "sql": {"sel": 2, "agg": 0, "conds": [[1, 0, str(n)]]}} for n in range(6)]
        rows += [{"table_id": table, "question": f"{first} {n}번 선수는 몇 명?",
                  "sql": {"sel": 0, "agg": 3, "conds": [[1, 0, str(n)]]}} for n in range(4)]
        refined = [{**rows[0], "question": f"{first} 0번 선수의 학교는?"}]
        _write_ko_part(folder, rows, [{"id": table, "header": header}], refined, part[:3])
    items = sources.ko_wikisql_fresh(tmp_path)
    assert items is not None
    ids = {i.id for i in items}
    assert {"kof-g00000", "kof-g10000", "kof-r00000", "kof-r10000"} <= ids
    assert all(i.id.startswith("kof-") and i.lang == "ko" for i in items)
    out = tmp_path / "suite"
    manifest = build.build(tmp_path, out, sets=["ko-wikisql-fresh"])
    cases = manifest["sets"]["ko-wikisql-fresh"]["cases"]
    assert {c["name"].split("/")[1] for c in cases} >= {"answered-one", "new"}
    assert {c["split"] for c in cases} == {"held-out"}
    assert manifest["sets"]["ko-wikisql-fresh"]["split_databases"]["tuning"] == []
    # absent files: the set is skipped, not an error
    (folder / sources.KO_WIKISQL_FRESH[1][2]).unlink()
    assert sources.ko_wikisql_fresh(tmp_path) is None


def test_the_fresh_bird_set_takes_what_mini_dev_did_not_on_held_out_databases(
        tmp_path: Path) -> None:
    import sources

    held, tuned = "california_schools", "card_games"
    assert (build.split_of(held), build.split_of(tuned)) == ("held-out", "tuning")
    dev = []
    for qid in range(12):
        db = held if qid < 10 else tuned
        dev.append({"question_id": qid, "db_id": db,
                    "question": f"How many schools are in county {qid}?",
                    "evidence": "county refers to County" if qid % 2 else "False",
                    "SQL": f"SELECT COUNT(*) FROM schools WHERE County = 'C{qid}'"})
    mini = [{**dev[0], "evidence": ""}, dev[1]]
    (tmp_path / "extra" / "bird-dev" / "data").mkdir(parents=True)
    (tmp_path / "extra" / "bird-dev" / "data" / "bird_dev.json").write_text(json.dumps(dev))
    (tmp_path / "bird-minidev").mkdir()
    (tmp_path / "bird-minidev" / "mini_dev_sqlite.json").write_text(json.dumps(mini))
    items = sources.bird_fresh(tmp_path)
    assert items is not None
    ids = {i.id for i in items}
    # mini-dev's ids are left out; "False" is no evidence: no long question for it
    assert not ids & {"bdf-q0000", "bdf-q0001", "bdf-e0001"}
    assert {"bdf-q0002", "bdf-q0003", "bdf-e0003"} <= ids and "bdf-e0002" not in ids
    assert all(i.dialect == "sqlite" for i in items)
    manifest = build.build(tmp_path, tmp_path / "suite", sets=["bird-fresh"])
    info = manifest["sets"]["bird-fresh"]
    assert info["split_databases"] == {"tuning": [], "held-out": [held]}
    assert {c["split"] for c in info["cases"]} == {"held-out"}
    answered = [c for c in info["cases"] if c["name"] == "bird-fresh/answered/held-out"]
    assert answered and answered[0]["asked"] == 4  # ids 3, 5, 7, 9: long questions
    (tmp_path / "extra" / "bird-dev" / "data" / "bird_dev.json").unlink()
    assert sources.bird_fresh(tmp_path) is None


def _write_mimicsql(tmp_path: Path, rows: dict[str, list[tuple[str, str, str, str]]]) -> Path:
    """MIMICSQL's four files (JSON lines of key, question_refine, sql) under ``tmp_path``."""
    folder = tmp_path / "extra" / "mimicsql" / "mimicsql_data"
    for name, part in rows.items():
        for kind, at in (("mimicsql_template", 1), ("mimicsql_natural_v2", 2)):
            path = folder / kind / f"{name}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps({"key": r[0], "question_refine": r[at],
                                                "sql": r[3]}) + "\n" for r in part))
    return folder


def test_mimicsql_pairs_each_template_question_with_its_rephrasing_held_out_only(
        tmp_path: Path) -> None:
    import sources

    def sql(age: int, table: str = "DEMOGRAPHIC") -> str:
        return f'SELECT COUNT ( DISTINCT {table}."SUBJECT_ID" ) FROM {table} WHERE {table}."AGE" < "{age}"'

    dev = [(f"k{n}", f"count the number of patients whose age is less than {n}",
            f"how many patients are younger than {n}?", sql(n)) for n in range(20, 28)]
    test = [(f"t{n}", f"what is the maximum age of patients with admission year {n}",
             f"give the oldest age of patients admitted in {n}",
             f'SELECT MAX ( DEMOGRAPHIC."AGE" ) FROM DEMOGRAPHIC WHERE DEMOGRAPHIC."ADMITYEAR" = "{n}"')
            for n in range(2100, 2106)]
    # a key whose two versions disagree on the SQL is left out, not guessed at
    test.append(("bad", "q", "q2", sql(99)))
    folder = _write_mimicsql(tmp_path, {"dev": dev, "test": test})
    lines = (folder / "mimicsql_natural_v2" / "test.json").read_text().splitlines()
    lines[-1] = json.dumps({"key": "bad", "question_refine": "q2", "sql": sql(98)})
    (folder / "mimicsql_natural_v2" / "test.json").write_text("\n".join(lines) + "\n")
    items = sources.mimicsql(tmp_path)
    assert items is not None
    by_id = {i.id: i for i in items}
    assert len(items) == 2 * (len(dev) + len(test) - 1)
    assert by_id["mim-t00000"].sql == by_id["mim-n00000"].sql == sql(20)
    assert by_id["mim-n00000"].question == "how many patients are younger than 20?"
    assert by_id["mim-t10000"].group == by_id["mim-n10000"].group == "mim-10000"
    assert "mim-t10006" not in by_id
    manifest = build.build(tmp_path, tmp_path / "suite", sets=["mimicsql"])
    info = manifest["sets"]["mimicsql"]
    assert info["split_databases"] == {"tuning": [], "held-out": ["mimicsql"]}
    assert {c["split"] for c in info["cases"]} == {"held-out"}
    answered = [c for c in info["cases"] if c["name"] == "mimicsql/answered-one/held-out"]
    assert answered and answered[0]["asked"] == len(dev) + len(test) - 1
    (folder / "mimicsql_template" / "dev.json").unlink()
    assert sources.mimicsql(tmp_path) is None
