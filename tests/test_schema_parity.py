"""sync, status, check and reset cover the schema index as well as the pairs; a grep-only
project builds nothing and loads no model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import write_pair
from tests.index_helpers import install_fake
from tests.schema_helpers import edit_manifest, settle
from wrenmem.embed.embedders import EMBEDDERS


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("WRENMEM_EMBEDDER", "fake")
    return install_fake(monkeypatch)


def out(result) -> dict:
    return json.loads(result.stdout)


def test_sync_check_status_reset_cover_both_tables(example_project: Path, cli, fake) -> None:
    root = example_project
    settle(root / "target" / "mdl.json")
    synced = out(cli("sync", "--pairs-only", "--json", root=root))
    assert synced["schema"] is None
    checked = cli("check", "--json", root=root)
    assert checked.exit_code == 1 and out(checked)["schema"]["missing"] is True

    synced = out(cli("sync", "--json", root=root))
    assert synced["schema"]["items"] > 0 and synced["schema"]["embedded"] > 0
    checked = cli("check", "--json", root=root)
    assert checked.exit_code == 0, checked.stdout
    status = out(cli("status", "--json", root=root))
    assert status["fresh"] and status["schema"]["items"] == synced["schema"]["items"]

    edit_manifest(root / "target" / "mdl.json",
                  lambda doc: doc["models"][0].update(
                      {"properties": {"description": "Changed for the test."}}))
    checked = cli("check", root=root)
    assert checked.exit_code == 1 and "schema: the manifest changed" in checked.stdout
    assert out(cli("status", "--json", root=root))["fresh"] is False
    again = out(cli("sync", "--json", root=root))
    assert 0 < again["schema"]["embedded"] < synced["schema"]["embedded"]
    assert cli("check", root=root).exit_code == 0

    reset = out(cli("reset", "--json", root=root))
    assert reset["dropped"] and reset["schema_dropped"]
    checked = cli("check", "--json", root=root)
    assert checked.exit_code == 1 and out(checked)["schema"]["missing"] is True


def test_a_grep_only_project_never_loads_a_model(example_project: Path, cli,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    def no_model(arg, root):
        raise AssertionError("a grep-only project asked for an embedder")

    for name in list(EMBEDDERS):
        monkeypatch.setitem(EMBEDDERS, name, no_model)
    monkeypatch.setattr("wrenmem.embed.embedders._CACHE", {})  # nothing created earlier either
    root = example_project
    (root / "wrenmem.toml").write_text('backend = "grep"\n')
    write_pair(root, "x.md", "How many stores?", "SELECT COUNT(*) FROM stores")
    result = cli("sync", root=root)
    assert result.exit_code == 0 and "nothing to build" in result.stdout
    checked = cli("check", root=root)
    assert checked.exit_code == 0 and "always in sync" in checked.stdout
    status = out(cli("status", "--json", root=root))
    assert status["backend"] == "grep" and "grep" in status["index_unavailable_reason"]
    assert cli("reset", root=root).exit_code == 0
    recalled = cli("recall", "-q", "number of stores", "--json", root=root)
    assert recalled.exit_code == 0
    assert not (root / ".wrenmem" / "index").exists()
