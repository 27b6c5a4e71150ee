"""usem3's C++ tokenizer (wrenmem.embed.usem3_fast.PieceIds): the pure-Python port's ids, exactly,
over thousands of texts in many scripts; checked at load; the pure port where it is not."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

from wrenmem.embed import usem3_fast
from wrenmem.embed.embedders import Usem3Embedder

pytest.importorskip("sentencepiece")


def _chars(first: int, last: int) -> list[str]:
    return [chr(c) for c in range(first, last + 1)]


WORDS = {
    "english": "how many orders were placed last month by each customer in the region "
               "average total revenue per store during week list all singers older than "
               "thirty".split(),
    "vietnamese": "có bao nhiêu đơn hàng được đặt tháng trước mỗi cửa hàng doanh thu "
                  "trung bình của người Tiếng Việt dấu ả ạ ằ ẳ ẵ ặ ề ể ễ ệ ỉ ị ổ ỗ ộ ờ ở "
                  "ỡ ợ ừ ử ữ ự ỳ ỷ ỹ ỵ".split(),
    "cyrillic": "сколько заказов было размещено в прошлом месяце каждым клиентом Привет "
                "мир ЁЖЗ їєґ ћђџ".split(),
    "arabic": "كم عدد الطلبات التي تم تقديمها في الشهر الماضي مرحبا بالعالم ١٢٣ ٤٥٦".split(),
    "sql": ["SELECT", "COUNT(*)", "FROM", "orders", "WHERE", "x", "<>", "'y';", "JOIN",
            "\"Singer\"", "GROUP BY", "ORDER BY", "1.5e3", ">=", "%LIKE%", "`t`.`c`",
            "t1.id=t2.id", "--", "/*", "*/", "||", "::text", "NULL"],
}
RANGES = {
    "chinese": _chars(0x4E00, 0x9FFF),
    "japanese": _chars(0x3041, 0x3096) + _chars(0x30A1, 0x30FA) + list("東京天気今日本語"),
    "korean": _chars(0xAC00, 0xD7A3) + _chars(0x1100, 0x1112),
    "emoji": _chars(0x1F300, 0x1F6FF) + _chars(0x1F900, 0x1FAFF) + ["👨‍👩‍👧", "🇫🇷", "❤️",
                                                                  "👍🏽"],
    "rare": _chars(0x20000, 0x200FF) + _chars(0xE000, 0xE0FF) + _chars(0x1D400, 0x1D4FF),
    "compat": _chars(0xFF01, 0xFF5E) + _chars(0x2460, 0x24FF) + _chars(0xFB00, 0xFB06)
              + _chars(0x2150, 0x218B) + _chars(0x3300, 0x33FF),
    "odd": _chars(0x00, 0x1F) + ["\x7f", "\u00a0", "\u00ad", "\u200b", "\u200c", "\u200d",
                                 "\u2028", "\u2029", "\u3000", "\ufeff", "\ufffd", "\u0301",
                                 "\u0308", "\u20dd", "\u2000", "\u2009", "\u202e"],
}
SEPARATORS = [" ", " ", " ", "", "  ", "\t", "\n", "\r\n", ", ", "\u3000", "\u00a0", "?"]


def corpus(n: int, seed: int = 20261201) -> list[str]:
    """``n`` texts mixing every script above, plus the edge cases spelled out."""
    rng = random.Random(seed)
    pools = [*WORDS.values(), *RANGES.values()]
    texts = ["", " ", "   ", "\t\n\r", "\x00", "\ufffd", "\u200b", "\ufeff", "?", "a",
             "😀😀😀 x", "a😀b𠀀c", "ﬁ😀", "ＡＢＣ　１２３", "  a   b  ", "\u0301a",
             "每个门店的销售额是多少？", "東京の天気はどうですか", "서울의 인구는?",
             "Tiếng Việt có dấu", "x" * 5000, "的" * 3000, "😀" * 2000,
             "SELECT name FROM singer WHERE age > 30; " * 300,
             " ".join(rng.choice(WORDS["english"]) for _ in range(4000))]
    while len(texts) < n:
        main = rng.choice(pools)
        parts = []
        for _ in range(rng.randint(1, 24)):
            pool = main if rng.random() < 0.7 else rng.choice(pools)
            word = rng.choice(pool)
            if pool in RANGES.values():
                word = "".join(rng.choice(pool) for _ in range(rng.randint(1, 6)))
            parts.append(word)
            parts.append(rng.choice(SEPARATORS))
        texts.append("".join(parts[:-1] if rng.random() < 0.8 else parts))
    return texts


@pytest.fixture(scope="module")
def tokenizers() -> tuple[usem3_fast.PieceIds, object]:
    import sentencepiece
    import usem3
    from usem3.pure_tokenizer import UsePureTokenizer

    path = usem3_fast.model_file(usem3)
    fast = usem3_fast.PieceIds(sentencepiece.SentencePieceProcessor(model_file=str(path)))
    return fast, UsePureTokenizer(str(path))


def test_the_cpp_tokenizer_gives_the_pure_ports_ids_on_thousands_of_texts(
        tokenizers: tuple[usem3_fast.PieceIds, object]) -> None:
    fast, pure = tokenizers
    texts = corpus(4000)
    want = [pure.encode(t, out_type=int, add_bos=True, add_eos=True)  # type: ignore[attr-defined]
            for t in texts]
    got = [fast.encode(t, out_type=int, add_bos=True, add_eos=True) for t in texts]
    different = [(t[:60], g[:12], w[:12]) for t, g, w in zip(texts, got, want, strict=True)
                 if g != w]
    assert not different, different[:5]
    assert fast.encode(texts[:50]) == want[:50]  # a list answers a list
    assert fast.encode("x", add_bos=False, add_eos=False) == pure.encode(  # type: ignore
        "x", add_bos=False, add_eos=False)
    # the corpus reaches the cases the C++ package answers otherwise
    assert sum(ids.count(0) > 1 for ids in want) > 100  # runs of unknown characters
    assert sum(ids == [1, 0, 2] for ids in want) >= 5  # texts normalised to nothing
    assert sum(len(ids) > 2000 for ids in want) >= 3  # very long texts


def test_without_the_unknown_run_rule_the_ids_would_differ(
        tokenizers: tuple[usem3_fast.PieceIds, object]) -> None:
    """What PieceIds adds to the C++ answer is needed (the comparison above can fail)."""
    fast, pure = tokenizers
    raw = fast._sp  # the C++ processor itself
    for text in ["😀😀😀 x", "", "\ufffd"]:
        assert [1, *raw.encode(text), 2] != pure.encode(  # type: ignore[attr-defined]
            text, out_type=int, add_bos=True, add_eos=True)


def test_the_probe_texts_are_checked_and_a_disagreeing_tokenizer_is_refused(
        tokenizers: tuple[usem3_fast.PieceIds, object],
        caplog: pytest.LogCaptureFixture) -> None:
    import sentencepiece
    import usem3

    fast, pure = tokenizers
    assert usem3_fast.agrees(fast, pure, usem3_fast.TOKEN_PROBE)
    # the same model file cut with sampling (subword regularisation): other ids
    sampling = usem3_fast.PieceIds(sentencepiece.SentencePieceProcessor(
        model_file=str(usem3_fast.model_file(usem3)), enable_sampling=True, alpha=0.5,
        nbest_size=-1))
    assert not usem3_fast.agrees(sampling, pure, usem3_fast.TOKEN_PROBE * 3)

    class Sampling:  # the package as installed, but its processor samples
        @staticmethod
        def SentencePieceProcessor(model_file: str) -> object:  # noqa: N802
            return sentencepiece.SentencePieceProcessor(
                model_file=model_file, enable_sampling=True, alpha=0.5, nbest_size=-1)

    real = sys.modules["sentencepiece"]
    try:
        sys.modules["sentencepiece"] = Sampling  # type: ignore[assignment]
        with caplog.at_level("WARNING", logger="wrenmem.embed.usem3_fast"):
            assert usem3_fast.fast_tokenizer(pure, usem3_fast.model_file(usem3)) is None
        assert "pure-Python tokenizer" in caplog.text
    finally:
        sys.modules["sentencepiece"] = real
    assert isinstance(usem3_fast.fast_tokenizer(pure, usem3_fast.model_file(usem3)),
                      usem3_fast.PieceIds)


def _loaded(usem3: object, tmp_path: Path) -> object:
    """The cached model with the C++ tokenizer where it agrees (as the embedder swaps it)."""
    return usem3_fast.with_fast_tokenizer(usem3, usem3_fast.load(usem3, 1, tmp_path / "cache"))


def test_without_the_package_or_when_disabled_usem3_keeps_its_own_tokenizer(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import usem3

    texts = corpus(300, seed=7)
    fast_model = _loaded(usem3, tmp_path)
    assert isinstance(fast_model._backend.sp, usem3_fast.PieceIds)
    want = fast_model.encode(texts)
    real = sys.modules["sentencepiece"]
    monkeypatch.setitem(sys.modules, "sentencepiece", None)  # import fails: not installed
    missing = _loaded(usem3, tmp_path)
    assert not isinstance(missing._backend.sp, usem3_fast.PieceIds)
    np.testing.assert_allclose(missing.encode(texts), want, atol=1e-6)
    monkeypatch.setitem(sys.modules, "sentencepiece", real)
    monkeypatch.setenv(usem3_fast.TOKENIZER_ENV, "python")
    disabled = _loaded(usem3, tmp_path)
    assert not isinstance(disabled._backend.sp, usem3_fast.PieceIds)


def test_the_fast_tokenizer_gives_the_packages_own_vectors(usem3_package: object) -> None:
    texts = corpus(600, seed=11)
    embedder = Usem3Embedder(threads=1)
    backend = embedder.load()._backend
    want = usem3_package.encode(texts)  # type: ignore[attr-defined]  # the package's own pass
    # a question or two keep the pure-Python tokenizer (the C++ one costs 0.3 s to load)
    np.testing.assert_allclose(embedder.embed(texts[:2]), want[:2], atol=1e-6)
    assert not isinstance(backend.sp, usem3_fast.PieceIds)
    # the embedder's own pass (wrenmem.embed.usem3_windows), the C++ tokenizer swapped in first
    np.testing.assert_allclose(embedder.embed(texts), want, atol=1e-6)
    assert isinstance(backend.sp, usem3_fast.PieceIds)
    # the package's forward pass over the C++ tokenizer's ids: the same arithmetic
    np.testing.assert_allclose(backend.encode(texts), want, atol=1e-6)
