"""vector and hybrid recall: same hits as grep, fresh results, filters, real model."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLE_KNOWLEDGE, PROCESS_TIMEOUT, write_pair
from index_helpers import RecordingEmbedder, install_fake, settings_for

from wrenmem.index.sync import sync_pairs
from wrenmem.recall import vector
from wrenmem.recall.backends import BACKENDS, choose_backend
from wrenmem.recall.hits import Filters, Hit
from wrenmem.recall.recaller import Recaller, recall_many
from wrenmem.recall.vector import HybridBackend, VectorBackend, where_clause
from wrenmem.settings import load_settings


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingEmbedder:
    return install_fake(monkeypatch)


def test_backends_are_registered_and_auto_picks_hybrid(project: Path) -> None:
    assert {"grep", "vector", "hybrid"} <= set(BACKENDS)
    notes: list[str] = []
    assert choose_backend(load_settings(project), notes.append) == "hybrid" and not notes


def test_where_clause_quotes_values() -> None:
    assert where_clause(Filters()) is None
    assert where_clause(Filters(datasource="o'x", tags=("a",), source="seed")) == (
        "datasource = 'o''x' AND source = 'seed' AND array_has(tags, 'a')")


def test_same_hit_shape_as_grep_and_ties_by_path(project: Path, fake: RecordingEmbedder) -> None:
    write_pair(project, "b.md", "How many orders?", "SELECT COUNT(*) FROM orders",
               tags="[kpi]", datasource="shop")
    write_pair(project, "a.md", "How many orders?", "SELECT COUNT(id) FROM orders")
    write_pair(project, "c.md", "Revenue by month", "SELECT 1")
    settings = settings_for(project)
    for backend in ("grep", "vector", "hybrid"):
        s = settings_for(project).__class__(**{**settings.__dict__, "backend": backend})
        [result] = recall_many(s, ["How many orders?"], 2, Filters())
        assert result.backend == backend
        assert [h.path for h in result.hits] == ["knowledge/sql/a.md", "knowledge/sql/b.md"]
        hit = result.hits[1]
        assert isinstance(hit, Hit) and hit.to_dict().keys() == {
            "question", "sql", "path", "score", "source", "datasource", "dialect", "tags",
            "backend", "raw_score", "also", "also_paths", "verified", "claimed_by",
            "allows_writes"}
        assert all(0.0 <= h.score <= 1.0 and h.raw_score is not None for h in result.hits)
        assert (hit.tags, hit.datasource, hit.source) == (("kpi",), "shop", "user")
        assert hit.sql == "SELECT COUNT(*) FROM orders"


def test_filters_apply_before_ranking(project: Path, fake: RecordingEmbedder) -> None:
    write_pair(project, "a.md", "How many orders?", "SELECT 1", datasource="shop")
    write_pair(project, "b.md", "Orders per day", "SELECT 2", datasource="crm", tags="[kpi]")
    sync_pairs(settings_for(project))
    backend = HybridBackend(settings_for(project))
    [hits] = backend.search(["How many orders?"], 5, Filters(datasource="crm"))
    assert [h.path for h in hits] == ["knowledge/sql/b.md"]
    [hits] = backend.search(["How many orders?"], 5, Filters(tags=("kpi",)))
    assert [h.path for h in hits] == ["knowledge/sql/b.md"]
    [hits] = backend.search(["How many orders?"], 5, Filters(source="seed"))
    assert hits == []


def test_recall_syncs_first_and_a_long_lived_backend_sees_changes(
        project: Path, fake: RecordingEmbedder) -> None:
    write_pair(project, "a.md", "How many orders?", "SELECT 1")
    settings = load_settings(project, {"embedder": "fake", "backend": "vector"})
    [result] = recall_many(settings, ["How many orders?"], 3, Filters())  # builds the index
    assert [h.path for h in result.hits] == ["knowledge/sql/a.md"]
    write_pair(project, "b.md", "Revenue by month", "SELECT 2")
    (project / "knowledge/sql/a.md").unlink()
    [result] = recall_many(settings, ["How many orders?"], 3, Filters())
    assert [h.path for h in result.hits] == ["knowledge/sql/b.md"]
    # The backend itself never syncs: a file nobody synced is not seen...
    backend = VectorBackend(settings)
    write_pair(project, "c.md", "How many orders?", "SELECT 3")
    [hits] = backend.search(["How many orders?"], 3, Filters())
    assert [h.path for h in hits] == ["knowledge/sql/b.md"]
    # ...and what another writer (the watcher, a hook) commits, the same object sees.
    sync_pairs(settings)
    write_pair(project, "d.md", "Something else", "SELECT 4")
    sync_pairs(settings)
    [hits] = backend.search(["Something else"], 1, Filters())
    assert hits[0].path == "knowledge/sql/d.md"


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("acme")
    shutil.copytree(EXAMPLE_KNOWLEDGE, root / "knowledge")
    # committed, as in a clone: a verification counts once it is in git history
    for args in (["init", "-q"], ["add", "-A"],
                 ["-c", "user.name=t", "-c", "user.email=t@example.com", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=root, check=True, capture_output=True, timeout=PROCESS_TIMEOUT)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["grep", "hybrid"])
def test_a_folded_hit_shows_the_twin_in_the_asked_language(example: Path, backend: str) -> None:
    # The example's monthly revenue pair is stored twice, English (verified) and Chinese
    # (not), with one SQL: one hit, shown in the question's language with that file.
    settings = load_settings(example, {"backend": backend})
    english, chinese = recall_many(settings, ["What was our revenue per month?",
                                              "2024年每个月的收入是多少"], 1, Filters())
    [hit] = english.hits
    assert (hit.question, hit.path, hit.verified) == (
        "Monthly revenue in 2024", "knowledge/sql/sales/monthly-revenue-in-2024.md", True)
    assert hit.also == ("2024年每个月的收入是多少？",)
    assert hit.also_paths == ("knowledge/sql/sales/2024年每个月的收入是多少.md",)
    [hit] = chinese.hits
    assert (hit.path, hit.verified) == ("knowledge/sql/sales/2024年每个月的收入是多少.md", False)
    assert hit.also == ("Monthly revenue in 2024",)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["vector", "hybrid"])
def test_real_model_finds_paraphrases_across_languages(example: Path, backend: str) -> None:
    settings = load_settings(example, {"backend": backend})
    questions = ["What was our revenue per month in 2024?", "2024年每个月的收入是多少？",
                 "Show the monthly revenue for 2024"]
    results = recall_many(settings, questions, 5, Filters())
    for result in results:
        assert result.backend == backend
        paths = [h.path for h in result.hits]
        assert any("2024" in p and ("revenue" in p or "收入" in p) for p in paths), paths


def test_min_score_means_the_same_for_every_backend(project: Path,
                                                    fake: RecordingEmbedder) -> None:
    write_pair(project, "a.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    write_pair(project, "b.md", "Revenue by month", "SELECT month, SUM(amount) FROM orders")
    write_pair(project, "c.md", "List the customers", "SELECT name FROM customers")
    settings = settings_for(project)
    for backend in ("grep", "vector", "hybrid"):
        s = settings.__class__(**{**settings.__dict__, "backend": backend})
        [everything] = recall_many(s, ["How many orders?"], 3, Filters())
        scores = [h.score for h in everything.hits]
        assert scores and all(0.0 <= x <= 1.0 for x in scores), (backend, scores)
        assert scores == sorted(scores, reverse=True)
        cut = scores[0]
        [kept] = recall_many(s, ["How many orders?"], 3, Filters(), min_score=cut)
        assert [h.path for h in kept.hits] == [h.path for h in everything.hits
                                               if h.score >= cut], backend
        [none] = recall_many(s, ["How many orders?"], 3, Filters(), min_score=1.0)
        assert all(h.score == 1.0 for h in none.hits)


@pytest.mark.slow
def test_real_model_hybrid_prefers_the_asked_value_over_a_near_duplicate(
        project: Path) -> None:
    write_pair(project, "heads-56.md", "Count the department heads whose age is above 56.",
               "SELECT count(*) FROM head WHERE age > 56")
    write_pair(project, "heads-60.md", "How many heads of the departments are older than 60?",
               "SELECT count(*) FROM head WHERE age > 60")
    write_pair(project, "names.md", "List the names of the departments.",
               "SELECT name FROM department")
    question = "How many heads of the departments are older than 56?"
    for backend in ("vector", "hybrid"):
        [result] = recall_many(load_settings(project, {"backend": backend}), [question], 3,
                               Filters())
        assert all(0.0 <= h.score <= 1.0 for h in result.hits)
        if backend == "vector":  # the dense model alone falls for the near-duplicate
            assert result.hits[0].path == "knowledge/sql/heads-60.md"
    assert result.hits[0].path == "knowledge/sql/heads-56.md"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["vector", "hybrid"])
def test_a_warm_backend_searches_its_table_in_memory_with_lancedbs_answers(
        tmp_path: Path, backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(EXAMPLE_KNOWLEDGE, tmp_path / "knowledge")
    settings = load_settings(tmp_path, {"backend": backend})
    sync_pairs(settings)
    questions = ["What was our revenue per month in 2024?", "有多少复购客户？",
                 "customers who never ordered", "orders pending for more than a week",
                 "What was our revenue per month in 2024?"]

    def answers(searcher: VectorBackend) -> list[list[tuple[str, float]]]:
        return [[(h.path, round(h.score, 5)) for h in searcher.search([q], 5, Filters())[0]]
                for q in questions]

    with monkeypatch.context() as patched:  # every search through LanceDB
        patched.setattr(vector, "IN_MEMORY_MAX_ROWS", 0)
        lancedb_answers = answers(Recaller(settings).backend(backend))
    # the table read whole from the backend's second search on
    warm = Recaller(settings).backend(backend)
    assert answers(warm) == lancedb_answers
    assert warm._memory is not None  # the later searches ran on the copy in memory
    copy = warm._memory
    # a filter is applied before ranking, as LanceDB's prefilter does
    [hits] = warm.search([questions[0]], 5, Filters(datasource="nowhere"))
    assert hits == []
    # what another writer commits, the warm backend sees: a new pair, a deleted one
    gone = lancedb_answers[0][0][0]
    (tmp_path / gone).unlink()
    write_pair(tmp_path, "unicorns.md", "How many unicorns live in the stable?",
               "SELECT count(*) FROM unicorns")
    sync_pairs(settings)
    [hits] = warm.search(["How many unicorns live in the stable?"], 3, Filters())
    assert hits[0].path == "knowledge/sql/unicorns.md"
    assert warm._memory is not None and warm._memory is not copy  # the new version, read
    assert all(h.path != gone for q in questions for h in warm.search([q], 5, Filters())[0])


@pytest.mark.slow
def test_real_model_hybrid_ranks_the_twin_of_a_stored_question_before_a_near_duplicate(
        project: Path) -> None:
    # The question asked is stored, and so is a twin of it (another question, the same SQL)
    # and a near-duplicate with another value. The twin is the same answer, not a rival.
    write_pair(project, "asked.md", "Which airport has the largest number of passengers?",
               "SELECT name FROM airport ORDER BY passengers DESC LIMIT 1")
    write_pair(project, "twin.md", "Name the busiest airport by passenger count.",
               "select name from airport order by passengers desc limit 1;")
    write_pair(project, "smallest.md", "Which airport has the smallest number of passengers?",
               "SELECT name FROM airport ORDER BY passengers ASC LIMIT 1")
    write_pair(project, "count.md", "How many airports are there?",
               "SELECT count(*) FROM airport")
    [result] = recall_many(load_settings(project, {"backend": "hybrid"}),
                           ["Which airport has the largest number of passengers?"], 3,
                           Filters())
    paths = [h.path for h in result.hits]
    # the twin is the same answer: folded into the first hit, not a rival for the second
    assert paths[0] == "knowledge/sql/asked.md", paths
    assert result.hits[0].also_paths == ("knowledge/sql/twin.md",)
    assert result.hits[0].also == ("Name the busiest airport by passenger count.",)
    assert "knowledge/sql/twin.md" not in paths


def test_a_warm_backend_on_an_empty_table_answers_nothing(project: Path,
                                                          fake: RecordingEmbedder) -> None:
    write_pair(project, "a.md", "How many orders?", "SELECT 1")
    settings = load_settings(project, {"embedder": "fake", "backend": "hybrid"})
    sync_pairs(settings)
    (project / "knowledge/sql/a.md").unlink()
    sync_pairs(settings)
    backend = HybridBackend(settings)
    for _ in range(3):  # the later searches would use the copy in memory
        assert backend.search(["How many orders?"], 3, Filters()) == [[]]
