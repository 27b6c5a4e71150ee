"""describe, fetch and seed as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import JAFFLE, REAL_MANIFESTS, write_pair
from wrenmem.pairs.catalog import scan
from wrenmem.settings import load_settings


def test_describe_real_manifests_as_a_process(wrenmem_proc, project: Path) -> None:
    for path in REAL_MANIFESTS:
        out = wrenmem_proc("describe", "--manifest", str(path))
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith("# Schema ") and out.stderr == ""
    out = wrenmem_proc("describe", "--manifest", str(JAFFLE), "--json")
    data = json.loads(out.stdout)
    assert data["counts"] == {"models": 2, "relationships": 1, "views": 1, "cubes": 1}
    assert data["dialect"] == "postgres" and data["characters"] == len(data["text"])
    assert "### Model customers\nOne row per customer." in data["text"]


def test_relative_manifest_flag_is_relative_to_the_shell(wrenmem_proc, project: Path,
                                                        tmp_path: Path) -> None:
    here = tmp_path / "elsewhere"
    here.mkdir()
    (here / "m.json").write_text(JAFFLE.read_text())
    out = wrenmem_proc("--project", str(project), "describe", "--manifest", "m.json", cwd=here)
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("content,message", [
    (None, "manifest not found"),
    ('{"models": [', "manifest is not valid JSON"),
    ('{"models": {"a": 1}}', "'models' must be a list, not an object"),
])
def test_broken_manifests_fail_cleanly(wrenmem_proc, project: Path, content: str | None,
                                       message: str) -> None:
    if content is not None:
        (project / "target").mkdir()
        (project / "target" / "mdl.json").write_text(content)
    for args in (["describe"], ["fetch", "-q", "x"], ["seed"]):
        out = wrenmem_proc(*args)
        assert out.returncode == 1, (args, out.stdout)
        assert out.stderr.startswith("error: ") and message in out.stderr
        assert "Traceback" not in out.stderr


def test_skipped_items_are_warned_on_stderr(cli, project: Path) -> None:
    (project / "target").mkdir()
    (project / "target" / "mdl.json").write_text(json.dumps({"models": [
        {"name": "t", "columns": [{"name": "a", "type": "INT"}, None]}, {"columns": []}],
        "relationships": [{"name": "r", "models": "t"}]}))
    out = cli("describe")
    assert out.exit_code == 0
    assert "warning: target/mdl.json: models[0] 't'.columns[1]: skipped" in out.stderr
    assert "relationships[0] 'r': skipped, 'models' must be a list of two" in out.stderr
    assert out.stdout.startswith("# Schema\n")


def test_fetch_cli_full_and_keyword_search(cli, example_project: Path) -> None:
    out = cli("fetch", "-q", "revenue", root=example_project)
    assert out.exit_code == 0 and out.stdout.startswith("# Schema acme.public")
    out = cli("fetch", "-q", "payment method", "--threshold", "0", "-b", "grep", "-k", "3",
              "--type", "column", "--json", root=example_project)
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["strategy"] == "search" and data["method"] == "keyword"
    assert data["results"][0]["id"] == "column:payments.method"
    assert {r["type"] for r in data["results"]} == {"column"}
    out = cli("fetch", "-q", "x", "--type", "colum", root=example_project)
    assert out.exit_code == 1 and "unknown item type 'colum'" in out.stderr


def test_seed_list_and_write(cli, example_project: Path) -> None:
    out = cli("seed", "--json", root=example_project)
    seeds = json.loads(out.stdout)
    assert {s["source"] for s in seeds} == {"seed"}
    listed = cli("seed", root=example_project).stdout
    assert "seed:model/orders/sum/amount  What is the total amount of all orders?\n" \
           "    SELECT SUM(amount) AS total_amount FROM orders" in listed
    write_pair(example_project, "mine.md", "List all orders", "SELECT id FROM orders",
               source="user")
    out = cli("seed", "--write", "--json", root=example_project)
    assert out.exit_code == 0, out.output
    report = json.loads(out.stdout)
    assert [s["nl"] for s in report["skipped"]] == ["List all orders"]
    assert len(report["written"]) == len(seeds) - 1
    settings = load_settings(example_project)
    files = [p for p in scan(settings).pairs if p.source == "seed"]
    assert len(files) == len(seeds) - 1
    assert all(p.path.startswith("knowledge/sql/seeds/") for p in files)
    assert (example_project / "knowledge/sql/mine.md").read_text().count("SELECT id") == 1
    # Materialised seeds are ordinary pairs now: recall finds each once, as a file.
    out = cli("recall", "-q", "total amount of all orders", "-b", "grep", "--json", "-k", "5",
              root=example_project)
    paths = [h["path"] for h in json.loads(out.stdout)[0]["hits"]]
    assert not any(p.startswith("seed:") for p in paths)
    assert len([p for p in paths if "total-amount-of-all-orders" in p]) == 1
    again = json.loads(cli("seed", "--write", "--json", root=example_project).stdout)
    assert not any(w["created"] for w in again["written"])


def test_fuzzed_manifests_through_the_cli(tmp_path: Path) -> None:
    """describe, fetch and seed on broken manifests: exit 0 or 1, never a traceback."""
    from click.testing import CliRunner
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from tests.test_manifest import manifests
    from wrenmem.cli import cli as group

    root = tmp_path / "p"
    (root / "target").mkdir(parents=True)
    runner = CliRunner()

    @settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(manifests | st.text(max_size=50).map(lambda t: {"_raw": t}))
    def check(document: dict) -> None:
        raw = document.pop("_raw", None) if isinstance(document, dict) else None
        (root / "target" / "mdl.json").write_text(raw if raw is not None
                                                  else json.dumps(document))
        for args in (["describe"], ["fetch", "-q", "orders", "--threshold", "0", "-b", "grep"],
                     ["seed", "--json"]):
            result = runner.invoke(group, ["--project", str(root), *args])
            assert result.exit_code in (0, 1), (args, result.output)
            assert result.exception is None or isinstance(result.exception, SystemExit), (
                args, repr(result.exception))

    check()


def test_missing_manifest_says_how_to_point_at_one(cli, project: Path) -> None:
    """Issue 22: "manifest not found" named neither --manifest nor the setting."""
    for args in (["describe"], ["fetch", "-q", "revenue"]):
        out = cli(*args)
        assert out.exit_code == 1, (args, out.output)
        message = out.stderr.strip()
        assert message.count("\n") == 0, message
        assert "target/mdl.json: manifest not found" in message
        assert "--manifest PATH" in message and "`manifest` setting" in message
        assert "WRENMEM_MANIFEST" in message and "wren" in message
