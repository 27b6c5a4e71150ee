"""The shared stat walk (wrenmem.pairs.listing): a walk finds what the catalog finds, after
every kind of change, and the no-op check built on it (the mirror's recorded walk) answers
as the full comparison."""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import SHORT_RACY_SECONDS as RACY
from tests.conftest import short_racy_window, write_pair
from tests.fakes import RecordingEmbedder
from tests.index_helpers import catalog_stats, install_fake, settings_for
from wrenmem.fs.fsutil import write_marshal
from wrenmem.index import state
from wrenmem.index.sync import sync_pairs
from wrenmem.pairs import listing
from wrenmem.settings import Settings, load_settings


@pytest.fixture(autouse=True)
def _short_racy_window(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests wait out the racy window (RACY + 0.1 s): half a second, not two."""
    short_racy_window(monkeypatch)


def _tree(project: Path) -> Path:
    knowledge = project / "knowledge" / "sql"
    for rel in ["a.md", "deep/er/b.md", "deep/c.md", "README.md", "notes.txt", "draft.md~",
                ".hidden.md", "ünï/中文.md", "g1/one.md", "g1/two.md", "g2/three.md"]:
        path = knowledge / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"---\nnl: {rel}\n---\n", encoding="utf-8")
    outside = project / "elsewhere"
    outside.mkdir()
    (outside / "e.md").write_text("x", encoding="utf-8")
    os.symlink(outside, knowledge / "linked-folder")
    os.symlink(outside / "e.md", knowledge / "linked-file.md")
    os.symlink(project / "later.md", knowledge / "g2" / "dangling.md")
    return knowledge


def test_a_walk_finds_what_the_catalog_finds(project: Path) -> None:
    knowledge = _tree(project)
    settings = load_settings(project)
    first = listing.walk(settings)
    assert first.stats == catalog_stats(settings)
    assert not first.complete  # the dangling link
    again = listing.walk(settings)
    assert (again.id, again.keys) == (first.id, first.keys)

    last = [first]

    def changed(change: object) -> None:
        """After each change: the walk equals the catalog, a second walk gives the same
        keys, and the listing id changed exactly when the paths did."""
        got = listing.walk(settings)
        assert got.stats == catalog_stats(settings), change
        assert (got.id == last[0].id) == (got.paths() == last[0].paths()), change
        assert listing.walk(settings).keys == got.keys, change
        last[0] = got
        time.sleep(0.05)  # past the clock's tick: the next change gets a later ctime

    edited = knowledge / "g1" / "one.md"
    text = edited.read_text(encoding="utf-8")
    edited.write_text(text.replace("one", "ONE"), encoding="utf-8")  # same size, in place
    changed("same-size edit")
    (knowledge / "g1" / "new.md").write_text("---\nnl: new\n---\n", encoding="utf-8")
    changed("added")
    (knowledge / "g1" / "two.md").unlink()
    changed("removed")
    (knowledge / "g1" / "new.md").rename(knowledge / "g1" / "renamed.md")
    changed("renamed")
    (knowledge / "deep" / "er").rename(knowledge / "deep" / "moved")
    changed("folder renamed")
    (project / "later.md").write_text("---\nnl: later\n---\n", encoding="utf-8")
    changed("a dangling link's target appeared")  # its folder did not change
    (knowledge / "g2" / "three.md").unlink()
    (knowledge / "g2" / "three.md").mkdir()
    (knowledge / "g2" / "three.md" / "inner.md").write_text("x", encoding="utf-8")
    changed("a file replaced by a folder")
    folder = knowledge / "deep"
    st = folder.stat()
    (folder / "hidden-by-utime.md").write_text("x", encoding="utf-8")
    os.utime(folder, ns=(st.st_atime_ns, st.st_mtime_ns))  # the mtime set back: ctime moves
    changed("a file added, the folder's mtime restored")
    os.symlink(outside_target(project), knowledge / "g1" / "more.md")
    changed("a symlinked file added")


def outside_target(project: Path) -> Path:
    return project / "elsewhere" / "e.md"


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> RecordingEmbedder:
    return install_fake(monkeypatch)


def _synced(project: Path, n: int) -> Settings:
    """``n`` pairs in three folders, old enough for their stats, and a first sync."""
    for i in range(n):
        write_pair(project, f"g{i % 3}/q{i}.md", f"How many orders in region {i}?",
                   f"SELECT {i}")
    time.sleep(RACY + 0.1)
    settings = settings_for(project)
    sync_pairs(settings)
    return settings


def test_the_quick_noop_answers_as_the_full_comparison(
        project: Path, fake: RecordingEmbedder) -> None:
    """The mirror's recorded walk (two byte strings compared) against the mapping of every
    file's stat: the same delta after each change, and a no-op only when nothing changed."""
    settings = _synced(project, 9)
    time.sleep(RACY + 0.1)
    recorded = state.load_state(settings)
    assert recorded is not None and recorded.walk_id is not None

    def both() -> tuple[tuple[str, ...], tuple[str, ...], bool]:
        quick = state.stat_delta(settings, fake.model_id)
        assert quick is not None
        mirror = state.load_state(settings)
        assert mirror is not None
        bare = replace(mirror, walk_id=None, walk_keys=None)  # the comparison of mappings
        write_marshal(settings.state_dir / state.STATE_NAME, bare.to_record())
        full = state.stat_delta(settings, fake.model_id)
        write_marshal(settings.state_dir / state.STATE_NAME, mirror.to_record())
        assert full is not None and not full.quick
        assert (quick.touched, quick.gone) == (full.touched, full.gone)
        return quick.touched, quick.gone, quick.quick

    assert both() == ((), (), True)
    edited = project / "knowledge" / "sql" / "g1" / "q4.md"
    edited.write_text(edited.read_text(encoding="utf-8").replace("region 4", "region X"),
                      encoding="utf-8")  # the same size, within the same second
    assert both() == (("knowledge/sql/g1/q4.md",), (), False)
    (project / "knowledge" / "sql" / "g2" / "q5.md").unlink()
    write_pair(project, "g0/new.md", "How many returns?", "SELECT 10")
    touched, gone, _quick = both()
    assert (set(touched), gone) == ({"knowledge/sql/g1/q4.md", "knowledge/sql/g0/new.md"},
                                    ("knowledge/sql/g2/q5.md",))
    report = sync_pairs(settings)
    assert (report.changed, report.removed, report.added) == (
        ("knowledge/sql/g1/q4.md",), ("knowledge/sql/g2/q5.md",), ("knowledge/sql/g0/new.md",))
    time.sleep(RACY + 0.1)
    # The two files were too recent for that sync's stats: read once more, unchanged.
    assert both()[:2] == (("knowledge/sql/g0/new.md", "knowledge/sql/g1/q4.md"), ())
    assert sync_pairs(settings).noop
    assert both() == ((), (), True)  # and that sync recorded its walk


def test_a_noop_without_a_recorded_walk_records_one(project: Path,
                                                    fake: RecordingEmbedder) -> None:
    """A mirror written by a scoped sync (``store``) or an older wrenmem has no walk: the
    next no-op compares mappings once and records its walk for the ones after it."""
    write_pair(project, "g/q.md", "How many orders?", "SELECT 1")
    time.sleep(RACY + 0.1)
    settings = settings_for(project)
    sync_pairs(settings)
    time.sleep(RACY + 0.1)
    mirror = state.load_state(settings)
    assert mirror is not None
    write_marshal(settings.state_dir / state.STATE_NAME,
                  replace(mirror, walk_id=None, walk_keys=None).to_record())
    assert sync_pairs(settings).noop
    after = state.load_state(settings)
    assert after is not None and after.walk_id is not None
    delta = state.stat_delta(settings, fake.model_id)
    assert delta is not None and delta.quick and delta.empty


def test_a_patched_mirror_equals_one_written_from_a_full_snapshot(
        project: Path, fake: RecordingEmbedder) -> None:
    """Small syncs splice their paths into the packed mirror (``patch_state``): after each,
    the mirror holds exactly the paths, hashes and errors a full snapshot finds, and the
    stats of a fresh walk."""
    from wrenmem.index.snapshot import take_snapshot

    settings = _synced(project, 12)
    sql = project / "knowledge" / "sql"

    def same_as_full(what: str) -> None:
        mirror = state.load_state(settings)
        assert mirror is not None, what
        snap = take_snapshot(settings)
        assert mirror.files == snap.file_hashes, what
        assert [e[0] for e in mirror.errors] == [e.path for e in snap.errors], what
        assert mirror.stats == {p: k for p, k in catalog_stats(settings).items()
                                if p in mirror.files}, what
        assert mirror.paths == tuple(sorted(mirror.paths)), what

    write_pair(project, "g1/a-new.md", "How many returns?", "SELECT 100")
    sync_pairs(settings)
    same_as_full("added")
    edited = sql / "g2" / "q5.md"
    edited.write_text(edited.read_text(encoding="utf-8").replace("region 5", "region Z"),
                      encoding="utf-8")
    sync_pairs(settings)
    same_as_full("edited in place")
    (sql / "g0" / "q0.md").unlink()
    (sql / "g1" / "q1.md").rename(sql / "g0" / "zz-moved.md")
    (sql / "g2" / "broken.md").write_text("no front matter", encoding="utf-8")
    sync_pairs(settings)
    same_as_full("removed, renamed, a broken file")
    time.sleep(RACY + 0.1)
    assert sync_pairs(settings).noop
    same_as_full("settled")
    delta = state.stat_delta(settings, fake.model_id)
    assert delta is not None and delta.quick


def test_the_embedding_cache_kept_in_memory_follows_the_file(tmp_path: Path) -> None:
    """A long-lived process keeps the cache it read or wrote; another process's write (a
    new file) is read again, never answered from the copy kept."""
    import numpy as np

    from wrenmem.index.embedcache import EmbedCache

    path = tmp_path / "embed-cache.bin"
    first = EmbedCache(path, "m")
    first.store({"a": np.ones(4, dtype=np.float32)})
    first.save()
    time.sleep(RACY + 0.1)
    assert EmbedCache(path, "m").has_all(["a"])  # from the copy kept
    other = {"version": 1, "entries": {("m", "other"): np.zeros(4, np.float32).tobytes()}}
    write_marshal(path, other)  # another process's save: a new file
    again = EmbedCache(path, "m")
    assert not again.has_all(["a"]) and len(again) == 1
    time.sleep(RACY + 0.1)
    kept = EmbedCache(path, "m")
    assert len(kept) == 1 and not kept.has_all(["a"])


def test_a_few_new_vectors_wait_in_memory_then_are_written(tmp_path: Path) -> None:
    """A long-lived process that wrote the cache a moment ago keeps one more vector in
    memory (its next cache has it) rather than writing 40 MB; a bigger change writes all."""
    import numpy as np

    from wrenmem.index import embedcache
    from wrenmem.index.embedcache import EmbedCache

    path = tmp_path / "embed-cache.bin"
    first = EmbedCache(path, "m")
    first.store({"a": np.ones(4, dtype=np.float32)})
    first.save()  # this process's first write: always written
    written = path.stat()
    second = EmbedCache(path, "m")
    second.store({"b": np.full(4, 2.0, dtype=np.float32)})
    second.save()
    assert path.stat().st_ino == written.st_ino  # not written again
    assert EmbedCache(path, "m").lookup(["b"])["b"].tolist() == [2.0] * 4
    third = EmbedCache(path, "m")
    third.store({f"t{i}": np.zeros(4, dtype=np.float32) for i in range(embedcache.SAVE_MIN_NEW)})
    third.save()
    assert path.stat().st_ino != written.st_ino
    embedcache._KEPT.clear()  # another process: reads the file
    assert EmbedCache(path, "m").has_all(["a", "b", "t0"])
