"""A same-size edit with its mtime put back (``touch -d``, ``cp -p``, some editors and
checkouts) is seen by every stat-keyed cache of the manifest (issue 39, item 11): the
prepared manifest (in this process and in a new one), the schema index's state (real
LanceDB), the seed
pairs and ``Memory.manifest``. They compare the change time (ctime), which no program can
set back. The pair-file caches have theirs in tests/test_uses.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import settle
from wrenmem.settings import load_settings


def _edit_keeping_the_stat(path: Path, old: str, new: str) -> None:
    assert len(old) == len(new)
    st = path.stat()
    text = path.read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new), encoding="utf-8")
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # as `touch -d` or `cp -p` does
    now = path.stat()
    assert (now.st_size, now.st_mtime_ns, now.st_ino) == (st.st_size, st.st_mtime_ns,
                                                           st.st_ino)


def test_a_manifest_edited_with_its_mtime_restored_is_read_again(
        example_project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.fakes import RecordingEmbedder
    from wrenmem.api import Memory
    from wrenmem.pairs.seeds import seed_pairs
    from wrenmem.schema import cache as schema_cache
    from wrenmem.schema import table as schema_index

    settings = load_settings(example_project)
    path = settings.manifest_path
    settle(monkeypatch)  # old enough for every cache to trust its stat
    memory = Memory(example_project)
    before = schema_cache.prepare(settings, path)
    assert "payments" in {m.name for m in memory.manifest().models}
    assert any("payments" in p.sql for p in seed_pairs(settings))
    assert schema_cache.prepare(settings, path) is before  # trusted by its stat
    fake = RecordingEmbedder()  # the state's stat is the point here, not the model
    schema_index.sync_schema(settings, embedder=fake)  # real LanceDB
    model = fake.model_id
    assert schema_index.is_fresh(settings, path, model)
    _edit_keeping_the_stat(path, '"name": "payments"', '"name": "payouts1"')
    settle(monkeypatch)  # not saved by the racy window: by the change time alone
    after = schema_cache.prepare(settings, path)  # this process's memo
    assert after.fingerprint != before.fingerprint
    schema_cache._memory.clear()  # a new process: the cache file
    assert schema_cache.prepare(settings, path).fingerprint == after.fingerprint
    names = {m.name for m in memory.manifest().models}
    assert "payouts1" in names and "payments" not in names
    seeds = [p.sql for p in seed_pairs(settings)]
    assert any("payouts1" in s for s in seeds) and not any("payments" in s for s in seeds)
    assert not schema_index.is_fresh(settings, path, model)  # the index syncs it again
    assert schema_index.sync_schema(settings, embedder=fake).embedded > 0


def test_a_knowledge_file_edited_with_its_mtime_restored_is_read_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.test_knowledge import knowledge_project
    from wrenmem.knowledge.files import load_knowledge

    root = knowledge_project(tmp_path / "shop")
    settings = load_settings(root)
    settle(monkeypatch)
    first = {e.title: e.body for e in load_knowledge(settings).rules}
    assert "starts in April" in first["Fiscal year"]
    _edit_keeping_the_stat(root / "knowledge" / "rules" / "rules.md", "starts in April",
                           "starts in March")
    settle(monkeypatch)
    again = {e.title: e.body for e in load_knowledge(settings).rules}
    assert "starts in March" in again["Fiscal year"]
