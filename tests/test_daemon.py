"""The warm daemon and its client: same answers as in-process, or no answer at all."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import stat
import time
from pathlib import Path

import pytest

from wrenmem.recall import daemon_client
from wrenmem.recall.daemon_client import remote_recall, request, settings_payload, socket_path
from wrenmem.recall.hits import Filters, RecallResult
from wrenmem.recall.recaller import recall_many
from wrenmem.settings import load_settings
from wrenmem.watch.daemon import DaemonServer


def assert_same_answers(got: list[RecallResult], want: list[RecallResult]) -> None:
    """The same hits in the same order; scores equal up to float32 rounding (a warm backend
    scans its vectors with numpy, LanceDB computes the same cosines in its own order)."""
    assert [(r.query, [h.path for h in r.hits]) for r in got] == \
        [(r.query, [h.path for h in r.hits]) for r in want]
    for r, w in zip(got, want, strict=True):
        for h, g in zip(r.hits, w.hits, strict=True):
            assert h.score == pytest.approx(g.score, abs=1e-5)
            assert h.raw_score == pytest.approx(g.raw_score, abs=1e-5)
            assert dataclasses.replace(h, score=g.score, raw_score=g.raw_score) == g


@pytest.fixture
def settings(example_project: Path, monkeypatch: pytest.MonkeyPatch):
    # grep needs no model; the index backends have their own tests below
    monkeypatch.setenv("WRENMEM_BACKEND", "grep")
    return load_settings(example_project)


@pytest.fixture
def server(settings):
    srv = DaemonServer(settings, info=lambda: {"mode": "test"})
    srv.start()
    yield srv
    srv.close()


QUESTIONS = ["What was our revenue per month?", "每个门店的销售额是多少？", "top customers"]


def test_socket_is_private(server, settings) -> None:
    mode = stat.S_IMODE(os.stat(server.path).st_mode)
    assert stat.S_ISSOCK(os.stat(server.path).st_mode)
    assert mode == 0o600
    assert stat.S_IMODE(os.stat(server.path.parent).st_mode) == 0o700
    assert server.path == settings.root / ".wrenmem" / "daemon.sock"


def test_daemon_answers_exactly_what_recall_many_does(server, settings) -> None:
    for backend in ("grep",):
        s = dataclasses.replace(settings, backend=backend)
        for filters in (Filters(), Filters(tags=("revenue",)), Filters(datasource="nope")):
            notes_remote: list[str] = []
            notes_local: list[str] = []
            remote = remote_recall(s, QUESTIONS, 4, filters, notify=notes_remote.append)
            local = recall_many(s, QUESTIONS, 4, filters, notify=notes_local.append)
            assert remote == local
            assert notes_remote == notes_local
    assert server.requests == 3


def test_daemon_sees_file_changes(server, settings) -> None:
    from conftest import write_pair

    # Dense recall always returns its nearest pairs, so "nothing about Zanzibar yet" is
    # "not the Zanzibar file" rather than "no hits" (grep would return none).
    before = remote_recall(settings, ["zanzibar"], 1, Filters())[0].hits
    assert all(h.path != "knowledge/sql/z.md" for h in before)
    write_pair(settings.root, "z.md", "Orders shipped to Zanzibar", "SELECT 1")
    hits = remote_recall(settings, ["zanzibar"], 1, Filters())[0].hits
    assert [h.path for h in hits] == ["knowledge/sql/z.md"]


def test_other_settings_are_refused(server, settings) -> None:
    other = dataclasses.replace(settings, embedder="minilm")
    reply = daemon_client._exchange(server.path, {"v": daemon_client.PROTOCOL, "op": "recall",
                                                  "args": {
        "queries": ["x"]}, "settings": settings_payload(other)}, 1, 5)
    assert reply["ok"] is False and "embedder" in reply["error"]
    assert remote_recall(other, ["x"], 1, Filters()) is None
    elsewhere = dataclasses.replace(settings, root=settings.root / "sub")
    assert request(elsewhere, "ping") is None  # another project's socket path: none there


def test_protocol_mismatch_and_garbage_are_refused(server, settings) -> None:
    reply = daemon_client._exchange(server.path, {"v": 99, "op": "ping"}, 1, 5)
    assert reply["ok"] is False and "protocol" in reply["error"]
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(server.path))
        sock.sendall(b"{not json\n")
        sock.shutdown(socket.SHUT_WR)
        assert json.loads(sock.recv(4096))["ok"] is False
    assert request(settings, "no-such-op") is None
    # the daemon survives all of that
    assert remote_recall(settings, ["revenue"], 1, Filters()) is not None


def test_no_socket_or_a_stale_one_falls_back_fast(settings) -> None:
    assert remote_recall(settings, ["revenue"], 1, Filters()) is None
    path = socket_path(settings.root)
    path.parent.mkdir(parents=True, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(path))  # a socket file nobody listens on: what SIGKILL leaves behind
    stale.close()
    started = time.monotonic()
    assert remote_recall(settings, ["revenue"], 1, Filters()) is None
    assert time.monotonic() - started < 0.5


def test_a_hung_daemon_times_out(settings, monkeypatch) -> None:
    path = socket_path(settings.root)
    path.parent.mkdir(parents=True, exist_ok=True)
    mute = socket.socket(socket.AF_UNIX)
    mute.bind(str(path))
    mute.listen(1)  # accepts connections, never answers
    monkeypatch.setattr(daemon_client, "REPLY_TIMEOUT", 0.3)
    try:
        assert remote_recall(settings, ["revenue"], 1, Filters()) is None
    finally:
        mute.close()


def test_disabled_by_environment(server, settings, monkeypatch) -> None:
    monkeypatch.setenv("WRENMEM_NO_DAEMON", "1")
    assert remote_recall(settings, ["revenue"], 1, Filters()) is None
    assert server.requests == 0


def test_a_socket_owned_by_someone_else_is_not_used(server, settings) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to give the socket away")
    os.chown(server.path, 12345, 12345)
    assert remote_recall(settings, ["revenue"], 1, Filters()) is None
    assert server.requests == 0


def test_long_project_paths_get_a_short_socket(tmp_path: Path) -> None:
    root = tmp_path / ("x" * 120)
    path = socket_path(root)
    assert len(str(path)) < 100 and path.name.endswith(".sock")
    assert path == socket_path(root)  # client and server agree
    assert socket_path(tmp_path / "short") == tmp_path / "short" / ".wrenmem" / "daemon.sock"


def test_long_path_daemon_works(tmp_path: Path) -> None:
    from conftest import write_pair

    root = tmp_path / ("deep-" * 25)
    write_pair(root, "a.md", "Revenue by month", "SELECT 1")
    s = load_settings(root, {"backend": "grep"})
    srv = DaemonServer(s)
    srv.start()
    try:
        assert stat.S_IMODE(os.stat(srv.path.parent).st_mode) == 0o700
        hits = remote_recall(s, ["revenue"], 1, Filters())
        assert hits is not None and hits[0].hits[0].path == "knowledge/sql/a.md"
    finally:
        srv.close()
    assert not srv.path.exists()


def test_ping_reports_the_daemon(server, settings) -> None:
    info = daemon_client.ping(settings.root)
    assert info["pid"] == os.getpid() and info["mode"] == "test"
    assert info["root"] == str(settings.root)
    assert info["warm"] is False  # nobody called warm()
    server.warm()  # (grep: nothing to load)
    assert daemon_client.ping(settings.root)["warm"] is True


def test_fetch_through_the_daemon_is_the_same(server, settings) -> None:
    from wrenmem.recall.daemon_client import remote_fetch
    from wrenmem.schema.fetch import fetch

    grep = dataclasses.replace(settings, backend="grep")
    for kw in ({}, {"threshold": 0}, {"threshold": 0, "types": ("column",), "k": 3},
               {"threshold": 0, "model": "orders"}):
        remote = remote_fetch(grep, "revenue by store", **kw)
        local = fetch(grep, "revenue by store", **kw)
        assert remote is not None
        assert remote.to_dict() == local.to_dict()
        assert remote.render() == local.render()
        assert remote.notes == local.notes and remote.warnings == local.warnings


def test_memory_fetch_through_the_daemon_returns_a_whole_fetch_result(server, settings
                                                                       ) -> None:
    from wrenmem import Memory
    from wrenmem.schema.fetch import FetchResult, fetch

    grep = dataclasses.replace(settings, backend="grep")
    before = server.requests
    for kw in ({}, {"threshold": 0, "k": 3}):
        remote = Memory.from_settings(grep, use_daemon=True).fetch("revenue by store", **kw)
        local = fetch(grep, "revenue by store", **kw)
        assert type(remote) is FetchResult  # every field, as declared
        assert remote.to_dict() == local.to_dict() and remote.warnings == local.warnings
        assert remote.strategy == local.strategy and remote.render() == local.render()
        assert [r.item for r in remote.results] == [r.item for r in local.results]
        assert [r.score for r in remote.results] == pytest.approx(
            [r.score for r in local.results], abs=1e-6)  # the reply rounds them
    assert server.requests == before + 2  # the daemon did answer


def test_a_draft_sql_reaches_the_daemon_and_the_same_answer_comes_back(server, settings
                                                                        ) -> None:
    draft = "SELECT date_trunc('month', ordered_at), sum(amount) FROM orders GROUP BY 1"
    seen: list[str | None] = []
    recall_warm = server.recaller.recall_warm

    def spy(*args, **kwargs):
        seen.append(kwargs.get("sql"))
        return recall_warm(*args, **kwargs)

    server.recaller.recall_warm = spy
    remote = remote_recall(settings, QUESTIONS, 3, Filters(), sql=draft)
    assert seen == [draft]
    assert remote == recall_many(settings, QUESTIONS, 3, Filters(), sql=draft)
    reply = request(settings, "recall", {"queries": ["x"], "k": 1, "sql": 42})
    assert reply is None  # not text: refused, the client answers itself


def test_fetch_errors_fall_back(server, settings) -> None:
    from wrenmem.recall.daemon_client import remote_fetch

    missing = dataclasses.replace(settings, manifest="nope.json")
    assert remote_fetch(missing, "x") is None  # other settings: refused
    (settings.root / "target" / "mdl.json").write_text("{broken", encoding="utf-8")
    assert remote_fetch(settings, "x") is None  # the CLI shows the error itself


@pytest.fixture
def indexed_server(indexed_example: Path, monkeypatch: pytest.MonkeyPatch):
    """A daemon over the session's indexed example (grep by default, as ``settings``)."""
    monkeypatch.setenv("WRENMEM_BACKEND", "grep")
    settings = load_settings(indexed_example)
    srv = DaemonServer(settings, info=lambda: {"mode": "test"})
    srv.start()
    yield settings
    srv.close()


@pytest.mark.slow
def test_index_backends_through_the_daemon(indexed_server, monkeypatch) -> None:
    """Real LanceDB and the real default model: same answers, and never a version that a
    writer is still in the middle of."""
    from conftest import write_pair

    from wrenmem.index.sync import sync_pairs
    from wrenmem.recall import recaller
    from wrenmem.storage.lock import index_lock

    settings = indexed_server
    monkeypatch.setattr(recaller, "WRITER_WAIT", 0.5)
    # the daemon's first index request loads the model and LanceDB: on a loaded machine
    # that takes longer than a user's client waits (the answers are the point here)
    monkeypatch.setattr(daemon_client, "REPLY_TIMEOUT", 300.0)

    for backend in ("hybrid", "vector"):
        s = dataclasses.replace(settings, backend=backend)
        for filters in (Filters(), Filters(tags=("revenue",))):
            remote = remote_recall(s, QUESTIONS, 4, filters)
            assert_same_answers(remote, recall_many(s, QUESTIONS, 4, filters))
            assert remote[0].backend == backend

    hybrid = dataclasses.replace(settings, backend="hybrid")
    question = ["How many capybaras did we adopt?"]
    assert "capybara" not in remote_recall(hybrid, question, 1, Filters())[0].hits[0].question
    with index_lock(settings):  # a writer between commits, as far as anyone can tell
        write_pair(settings.root, "capy.md", "How many capybaras did we adopt?", "SELECT 1")
        sync_pairs(settings)
        notes: list[str] = []
        started = time.monotonic()
        during = remote_recall(hybrid, question, 1, Filters(), notify=notes.append)
        waited = time.monotonic() - started
    assert "capybara" not in during[0].hits[0].question  # the last whole version
    # ... said to be stale, after waiting for the writer: a file was saved since that version
    assert any(n.startswith("stale: the index is being written") for n in notes), notes
    assert waited >= 0.5
    after = remote_recall(hybrid, question, 1, Filters())
    assert after[0].hits[0].path == "knowledge/sql/capy.md"
    assert_same_answers(after, recall_many(hybrid, question, 1, Filters()))

    # rows added by another process (a LanceDB handle kept from before would still rank with
    # the old full-text index). Questions without full-text ties: LanceDB orders tied rows
    # differently from one search to the next, even in one process without the daemon.
    for i, nl in enumerate(["How many okapi were sold last week?",
                            "Okapi sales per store over the last seven days",
                            "Weekly okapi revenue"]):
        write_pair(settings.root, f"okapi-{i}.md", nl, "SELECT 1")
    from conftest import run_wrenmem

    assert run_wrenmem(["sync"], settings.root).returncode == 0
    last_week = ["How many orders were cancelled last week?", "okapi sold last week"]
    assert_same_answers(remote_recall(hybrid, last_week, 5, Filters()),
                        recall_many(hybrid, last_week, 5, Filters()))


@pytest.mark.slow
def test_a_warm_hybrid_recall_fences_once_and_sees_the_next_edit(server, settings,
                                                                 monkeypatch) -> None:
    """One file-system fence a request: the index's freshness and the vocabulary's (of the
    shown scores) are checked behind the same one; an edit saved before the next request is
    in its answer, scores included."""
    from conftest import write_pair

    source = server.freshness.source
    if source is None or source.mode != "inotify":
        pytest.skip("no inotify here: every recall syncs first, with no fence")
    hybrid = dataclasses.replace(settings, backend="hybrid")
    question = ["How many pangolins did we rescue?"]
    for _ in range(2):  # the index, then the vocabulary, synced and held
        assert remote_recall(hybrid, question, 1, Filters()) is not None
    fences: list[bool] = []
    real = source.fence

    def counted(*args, **kwargs):
        fences.append(real(*args, **kwargs))
        return fences[-1]

    monkeypatch.setattr(source, "fence", counted)
    assert remote_recall(hybrid, question, 1, Filters()) is not None
    assert fences == [True]
    write_pair(settings.root, "pangolin.md", question[0], "SELECT 2")
    after = remote_recall(hybrid, question, 1, Filters())
    assert after[0].hits[0].path == "knowledge/sql/pangolin.md"
    assert_same_answers(after, recall_many(hybrid, question, 1, Filters()))
    assert len(fences) == 2


def test_a_busy_index_with_no_whole_version_known_is_refused(server, settings,
                                                             monkeypatch) -> None:
    from wrenmem.recall import backends as recall
    from wrenmem.storage.lock import index_lock

    hybrid = dataclasses.replace(settings, backend="hybrid")
    monkeypatch.setitem(recall.BACKENDS, "hybrid", lambda _s: _FakeIndexBackend())
    with index_lock(settings):
        assert remote_recall(hybrid, ["x"], 1, Filters()) is None


class _FakeIndexBackend:
    """Only its shape matters: the daemon must refuse before searching it."""

    name = "hybrid"
    uses_index = True

    def table(self):
        raise AssertionError("must not be opened while a writer holds the lock")

    def search(self, queries, k, filters):
        raise AssertionError("must not search")


def test_status_through_the_daemon_is_the_same(server, settings) -> None:
    from wrenmem.recall.daemon_client import remote_call
    from wrenmem.recall.status import status_data
    from wrenmem.storage.lock import index_lock

    remote = remote_call(settings, "status", {})
    assert remote == status_data(settings)
    assert remote["backend"] == "grep"
    with index_lock(settings):  # a writer between commits: the CLI computes it itself
        assert remote_call(settings, "status", {}) is None


def test_edits_just_before_a_request_are_seen(server, settings) -> None:
    """Nothing changed: the daemon answers from what it keeps. A hand edit (new, changed,
    deleted file) made just before a request is in that request's answer: the fence waits
    for the edit's events, however soon the request follows."""
    from conftest import write_pair

    remote_recall(settings, ["warm up"], 1, Filters())
    for i in range(10):
        path = write_pair(settings.root, f"zanzibar/z{i}.md", f"Orders shipped to Zanzibar {i}",
                          "SELECT 1")
        hits = remote_recall(settings, [f"Zanzibar {i}"], 1, Filters())[0].hits
        assert [h.path for h in hits] == [f"knowledge/sql/zanzibar/z{i}.md"], i
        path.write_text(path.read_text().replace("Zanzibar", "Okapi"))
        hits = remote_recall(settings, [f"Okapi {i}"], 1, Filters())[0].hits
        assert [h.path for h in hits] == [f"knowledge/sql/zanzibar/z{i}.md"], i
        path.unlink()
        assert remote_recall(settings, [f"Okapi {i}"], 1, Filters())[0].hits == ()
    assert remote_recall(settings, QUESTIONS, 4, Filters()) == recall_many(settings, QUESTIONS,
                                                                          4, Filters())


@pytest.mark.slow
def test_the_index_is_synced_only_after_a_change(server, settings, monkeypatch) -> None:
    """The catch-up sync (a stat of every pair file) runs for the first request and after a
    change, not for requests in between."""
    from conftest import write_pair

    from wrenmem.recall import recaller

    syncs: list[int] = []
    real = recaller.catch_up
    monkeypatch.setattr(recaller, "catch_up", lambda s, e=None: syncs.append(1) or real(s, e))
    hybrid = dataclasses.replace(settings, backend="hybrid")
    first = remote_recall(hybrid, QUESTIONS, 3, Filters())
    assert len(syncs) == 1
    for _ in range(3):  # from the second search on, the vectors are scanned in memory
        assert_same_answers(remote_recall(hybrid, QUESTIONS, 3, Filters()), first)
    assert len(syncs) == 1  # nothing changed: no walk
    write_pair(settings.root, "capy.md", "How many capybaras did we adopt?", "SELECT 1")
    after = remote_recall(hybrid, ["capybaras adopted"], 1, Filters())
    assert after[0].hits[0].path == "knowledge/sql/capy.md"  # at once, not eventually
    assert len(syncs) == 2
    assert_same_answers(after, recall_many(hybrid, ["capybaras adopted"], 1, Filters()))


def test_the_warm_up_waits_for_whoever_holds_the_index_lock(settings) -> None:
    """A first request's search (or a writer) holding the index lock when the warm-up
    starts: the warm-up waits for it and still opens and keeps the backend."""
    import threading

    from conftest import index_lock_held

    hybrid = dataclasses.replace(settings, backend="hybrid")
    srv = DaemonServer(hybrid)
    srv.start()
    try:
        srv.recaller.embedder.embed(["the model, loaded before"])  # (the warm-up's first step)
        with index_lock_held(hybrid) as release:
            threading.Timer(0.6, release.set).start()
            started = time.monotonic()
            srv.warm()
        assert time.monotonic() - started >= 0.5  # it waited, rather than give up
        assert srv.recaller._kept  # the index backend, opened and kept
        assert daemon_client.ping(hybrid.root)["warm"] is True
    finally:
        srv.close()
