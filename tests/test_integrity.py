"""A damaged or foreign index is detected by `check` and `status`, repaired by `sync`, and
never reaches the user as a LanceDB traceback."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.conftest import write_pair
from tests.index_helpers import install_fake

LANCE = Path(".wrenmem") / "index" / "pairs.lance"


def _runner(root: Path, env: dict[str, str] | None = None) -> Callable[..., Result]:
    from wrenmem.cli import cli as group

    def run(*args: str) -> Result:
        return CliRunner().invoke(group, ["--project", str(root), *args], env=env,
                                  catch_exceptions=False)

    return run


@pytest.fixture
def synced(project: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    install_fake(monkeypatch)
    (project / "wrenmem.toml").write_text('embedder = "fake"\n', encoding="utf-8")
    for i in range(3):
        write_pair(project, f"q{i}.md", f"How many orders in region {i}?", f"SELECT {i}")
    result = _runner(project)("sync")
    assert result.exit_code == 0, result.output
    assert _runner(project)("check").exit_code == 0
    return project


def _delete_data(root: Path) -> None:
    for f in (root / LANCE / "data").glob("*.lance"):
        f.unlink()


def _truncate(pattern: str) -> Callable[[Path], None]:
    def damage(root: Path) -> None:
        files = list((root / LANCE).glob(pattern))
        assert files
        for f in files:
            with f.open("r+b") as fh:
                fh.truncate(10)
    return damage


def _delete_indices(root: Path) -> None:
    shutil.rmtree(root / LANCE / "_indices")


DAMAGE = {"deleted data": _delete_data, "truncated data": _truncate("data/*.lance"),
          "truncated manifests": _truncate("_versions/*.manifest"),
          "deleted FTS index": _delete_indices}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=list(DAMAGE))
def test_damage_is_detected_and_repaired(synced: Path, damage: Callable[[Path], None]) -> None:
    run = _runner(synced)
    damage(synced)
    check = run("check")
    assert check.exit_code == 1, check.output
    assert "damaged:" in check.output and "Traceback" not in check.output
    status = run("status")
    assert status.exit_code == 0 and "fresh:    no" in status.output, status.output
    recall = run("recall", "-q", "orders in region 1", "-b", "hybrid")  # syncs first
    assert recall.exit_code == 0, recall.output
    assert "region 1" in recall.output
    assert run("check").exit_code == 0
    hybrid = run("recall", "-q", "orders", "-b", "hybrid", "--json")
    assert hybrid.exit_code == 0


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=list(DAMAGE))
def test_plain_sync_repairs(synced: Path, damage: Callable[[Path], None]) -> None:
    run = _runner(synced)
    damage(synced)
    result = run("sync")
    assert result.exit_code == 0, result.output
    assert "3 rows" in result.output
    assert run("check").exit_code == 0
    assert "fresh:    yes" in run("status").output


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=list(DAMAGE))
def test_full_sync_and_reset_survive_damage(synced: Path,
                                            damage: Callable[[Path], None]) -> None:
    run = _runner(synced)
    damage(synced)
    assert run("sync", "--full").exit_code == 0
    damage(synced)
    assert run("reset").exit_code == 0
    assert run("sync").exit_code == 0 and run("check").exit_code == 0


def test_every_index_file_damaged_is_noticed(synced: Path) -> None:
    run = _runner(synced)
    def files() -> list[Path]:
        return sorted(p for p in (synced / LANCE).rglob("*") if p.is_file())

    count = len(files())
    assert count > 5
    for n in range(count):  # a repair renames files: list them again each time
        path = files()[n % len(files())]
        path.write_bytes(path.read_bytes()[: max(0, path.stat().st_size // 2)])
        result = run("check")
        assert result.exit_code == 1, (path, result.output)
        assert "Traceback" not in result.output
        assert run("sync").exit_code == 0
        assert run("check").exit_code == 0, path


# --- item 8: an index location shared by two projects ---------------------------------------

def test_two_projects_cannot_share_one_index(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    install_fake(monkeypatch)
    shared = tmp_path / "shared-index"
    roots = []
    for name in ("one", "two"):
        root = tmp_path / name
        (root / "knowledge" / "sql").mkdir(parents=True)
        (root / "wrenmem.toml").write_text('embedder = "fake"\n', encoding="utf-8")
        write_pair(root, f"{name}.md", f"Question of project {name}?", "SELECT 1")
        roots.append(root)
    # A place outside the project: named in the environment (a project's wrenmem.toml may not)
    one, two = (_runner(r, {"WRENMEM_INDEX": str(shared)}) for r in roots)
    assert one("sync").exit_code == 0
    refused = two("sync")
    assert refused.exit_code == 1 and "another project" in refused.output
    assert str(roots[0]) in refused.output
    checked = two("check")
    assert checked.exit_code == 1 and "another project" in checked.output
    assert one("check").exit_code == 0  # project one's rows were not touched


def test_memory_uri_is_refused(project: Path) -> None:
    result = _runner(project, {"WRENMEM_INDEX": "memory://"})("status")
    assert result.exit_code == 1
    assert "memory://" in result.output


# --- the schema table ----------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["data/*.lance", "_versions/*.manifest"])
def test_damaged_schema_table_is_rebuilt_by_fetch(example_project: Path,
                                                  monkeypatch: pytest.MonkeyPatch,
                                                  damage: str) -> None:
    install_fake(monkeypatch)
    (example_project / "wrenmem.toml").write_text('embedder = "fake"\nfetch_threshold = 10\n',
                                                   encoding="utf-8")
    run = _runner(example_project)
    first = run("fetch", "-q", "revenue by customer")
    assert first.exit_code == 0, first.output
    for f in (example_project / ".wrenmem" / "index" / "schema_items.lance").glob(damage):
        with f.open("r+b") as fh:
            fh.truncate(10)
    again = run("fetch", "-q", "revenue by customer")
    assert again.exit_code == 0, again.output
    assert again.output == first.output
