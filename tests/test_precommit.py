"""The hooks of .pre-commit-hooks.yaml through the real pre-commit framework, as a user runs
them, against a commit of this working tree, in a fresh git repository: `pre-commit try-repo`
once, then a `.pre-commit-config.yaml` naming that commit and `pre-commit run`.

try-repo builds the hooks' environment from the package registry in a throw-away store every
time; `pre-commit run` builds it once in the module's shared PRE_COMMIT_HOME.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, documentation, write_pair

GIT_ENV = {"GIT_AUTHOR_NAME": "Test", "GIT_AUTHOR_EMAIL": "test@example.com",
           "GIT_COMMITTER_NAME": "Test", "GIT_COMMITTER_EMAIL": "test@example.com",
           "GIT_CONFIG_NOSYSTEM": "1"}


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess:
    full = {**os.environ, **GIT_ENV, **(env or {})}
    return subprocess.run(args, cwd=cwd, env=full, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This working tree (tracked and new files, not ignored ones) committed in a new repo:
    try-repo installs the hooks from a commit, so uncommitted work must be in one."""
    snapshot = tmp_path_factory.mktemp("hookrepo")
    listed = run(["git", "ls-files", "-z", "-co", "--exclude-standard"], REPO)
    for rel in filter(None, listed.stdout.split("\0")):
        source = REPO / rel
        if source.is_file():
            (snapshot / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, snapshot / rel)
    for args in (["git", "init", "-q", "-b", "main"], ["git", "add", "-A"],
                 ["git", "commit", "-q", "-m", "snapshot"]):
        assert run(args, snapshot).returncode == 0
    return snapshot


@pytest.fixture(scope="module")
def pre_commit_home(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Environment shared by the module's runs: pre-commit's store and pip's cache."""
    return {"PRE_COMMIT_HOME": str(tmp_path_factory.mktemp("pre-commit-home")),
            "PIP_CACHE_DIR": str(tmp_path_factory.mktemp("pip-cache"))}


@pytest.fixture
def user_repo(tmp_path: Path) -> Path:
    root = tmp_path / "user"
    (root / "knowledge" / "sql").mkdir(parents=True)
    assert run(["git", "init", "-q", "-b", "main"], root).returncode == 0
    return root


def try_repo(hook_repo: Path, home: dict[str, str], user_repo: Path, hook: str
             ) -> subprocess.CompletedProcess:
    assert run(["git", "add", "-A"], user_repo).returncode == 0
    return run([sys.executable, "-m", "pre_commit", "try-repo", str(hook_repo), hook,
                "--all-files", "--color", "never"], user_repo, home)


def run_hook(hook_repo: Path, home: dict[str, str], user_repo: Path, hook: str
             ) -> subprocess.CompletedProcess:
    """`pre-commit run HOOK --all-files` with a config naming the snapshot's commit."""
    rev = run(["git", "rev-parse", "HEAD"], hook_repo).stdout.strip()
    config = {"repos": [{"repo": str(hook_repo), "rev": rev, "hooks": [{"id": hook}]}]}
    (user_repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    assert run(["git", "add", "-A"], user_repo).returncode == 0
    return run([sys.executable, "-m", "pre_commit", "run", hook, "--all-files", "--color",
                "never"], user_repo, home)


def test_manifest_declares_the_hooks() -> None:
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    assert [h["id"] for h in hooks] == ["wrenmem-validate", "wrenmem-fmt", "wrenmem-duplicates",
                                        "wrenmem-sync"]
    checks = hooks[:3]
    assert all(h["language"] == "python" and h["entry"].startswith("wrenmem ") for h in checks)
    docs = documentation()
    assert all(h["id"] in docs for h in hooks), "every hook id is documented"


def test_validate_hook_with_try_repo(hook_repo: Path, pre_commit_home: dict[str, str],
                                     user_repo: Path) -> None:
    (user_repo / "target").mkdir()
    shutil.copy(REPO / "target" / "mdl.json", user_repo / "target" / "mdl.json")
    write_pair(user_repo, "good.md", "How many orders?", "SELECT COUNT(*) FROM orders")
    bad = user_repo / "knowledge" / "sql" / "bad.md"
    bad.write_text("---\nnl: Revenue by month\n---\n\nNotes.\n\n```sql\nSELECT\n"
                   "  DATE_TRUNC('month', ordered_at),\n  SUM(amount\nFROM orders\n```\n")
    column = write_pair(user_repo, "column.md", "Revenue by country",
                        "SELECT c.country, SUM(o.amount)\nFROM orders o\n"
                        "JOIN customers c ON c.id = o.customer_id\nWHERE o.statuz = 'paid'\n"
                        "GROUP BY 1")
    done = try_repo(hook_repo, pre_commit_home, user_repo, "wrenmem-validate")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("knowledge/")]
    assert sorted(lines) == [
        "knowledge/sql/bad.md:11:1: WM002 SQL does not parse as postgres SQL: Expecting ) near 'FROM'",
        "knowledge/sql/column.md:9:9: WM004 unknown column 'statuz' in 'orders'; did you mean "
        "'status'?"]
    bad.unlink()
    column.unlink()
    done = run_hook(hook_repo, pre_commit_home, user_repo, "wrenmem-validate")
    assert done.returncode == 0, done.stdout
    assert "Passed" in done.stdout


def test_validate_hook_checks_knowledge_files(hook_repo: Path, pre_commit_home: dict[str, str],
                                             user_repo: Path) -> None:
    (user_repo / "target").mkdir()
    shutil.copy(REPO / "target" / "mdl.json", user_repo / "target" / "mdl.json")
    (user_repo / "knowledge" / "glossary").mkdir()
    terms = user_repo / "knowledge" / "glossary" / "terms.md"
    terms.write_text("## GMV\nSynonyms: gross merchandise value\nColumns: orders.amont\n\n"
                     "All order amounts.\n\n## Basket\n")
    done = run_hook(hook_repo, pre_commit_home, user_repo, "wrenmem-validate")
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("knowledge/")]
    assert lines == [
        "knowledge/glossary/terms.md:3:1: WM015 unknown column 'amont' of orders in glossary "
        "Columns ('orders.amont'); did you mean 'amount'?",
        "knowledge/glossary/terms.md:7:1: WM013 empty glossary term 'Basket': write its text "
        "or remove the heading"]
    terms.write_text("## GMV\nColumns: orders.amount\n\nAll order amounts.\n")
    done = run_hook(hook_repo, pre_commit_home, user_repo, "wrenmem-validate")
    assert done.returncode == 0, done.stdout


def test_fmt_hook(hook_repo: Path, pre_commit_home: dict[str, str], user_repo: Path) -> None:
    wren = user_repo / "knowledge" / "sql" / "wren.md"
    wren.write_text("---\nnl: Wren style\nsql: SELECT 1 AS one\n---\n")
    done = run_hook(hook_repo, pre_commit_home, user_repo, "wrenmem-fmt")
    assert done.returncode == 1
    assert "reformatted knowledge/sql/wren.md" in done.stdout
    assert "```sql\nSELECT 1 AS one\n```" in wren.read_text()
    done = run_hook(hook_repo, pre_commit_home, user_repo, "wrenmem-fmt")
    assert done.returncode == 0, done.stdout


def test_fmt_hook_keeps_a_wren_project_wren(hook_repo: Path, pre_commit_home: dict[str, str],
                                            user_repo: Path) -> None:
    (user_repo / "wrenmem.toml").write_text('format = "wren"\n')
    wren = user_repo / "knowledge" / "sql" / "wren.md"
    wren.write_text("---\nnl: Wren style\nsql: |-\n  SELECT 1 AS one\nsource: user\n---\n")
    fenced = write_pair(user_repo, "fenced.md", "Fenced style", "SELECT 2 AS two")
    done = run_hook(hook_repo, pre_commit_home, user_repo, "wrenmem-fmt")
    assert done.returncode == 1
    assert "reformatted knowledge/sql/fenced.md" in done.stdout
    assert "reformatted knowledge/sql/wren.md" not in done.stdout
    assert "sql: |-\n  SELECT 2 AS two\n" in fenced.read_text() and "```" not in fenced.read_text()
    done = run_hook(hook_repo, pre_commit_home, user_repo, "wrenmem-fmt")
    assert done.returncode == 0, done.stdout


def test_duplicates_hook(hook_repo: Path, pre_commit_home: dict[str, str],
                         user_repo: Path) -> None:
    write_pair(user_repo, "a.md", "Orders per store", "SELECT store_id, COUNT(*) FROM orders "
               "GROUP BY store_id")
    write_pair(user_repo, "b.md", "orders per store?", "SELECT 1")
    done = run_hook(hook_repo, pre_commit_home, user_repo, "wrenmem-duplicates")
    assert done.returncode == 1
    assert "knowledge/sql/b.md:2:1: WM007 the same question as knowledge/sql/a.md with a different " \
           "SQL" in done.stdout
    (user_repo / "knowledge" / "sql" / "b.md").unlink()
    done = run_hook(hook_repo, pre_commit_home, user_repo, "wrenmem-duplicates")
    assert done.returncode == 0, done.stdout


def test_this_repository_dogfoods_its_hooks(hook_repo: Path, pre_commit_home: dict[str, str]
                                            ) -> None:
    """.pre-commit-config.yaml runs the three hooks on knowledge/, and knowledge/ passes."""
    path = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    done = run([sys.executable, "-m", "pre_commit", "run", "--all-files", "--color", "never"],
               hook_repo, {**pre_commit_home, "PATH": path})
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("wrenmem validate", "wrenmem fmt", "wrenmem duplicates"):
        assert any(line.startswith(name) and line.endswith("Passed")
                   for line in done.stdout.splitlines()), done.stdout


def test_sync_hook_for_repositories_whose_hooks_pre_commit_manages(
        hook_repo: Path, pre_commit_home: dict[str, str], user_repo: Path,
        tmp_path: Path) -> None:
    """`wrenmem-sync` at the post-* stages runs the wrenmem on PATH and never fails git."""
    write_pair(user_repo, "a.md", "Question A", "SELECT 1 AS a")
    (user_repo / "wrenmem.toml").write_text('backend = "grep"\n')
    (user_repo / ".gitignore").write_text(".wrenmem/\n")
    rev = run(["git", "rev-parse", "HEAD"], hook_repo).stdout.strip()
    config = {"default_install_hook_types": ["post-checkout", "post-merge", "post-rewrite",
                                             "post-commit"],
              "repos": [{"repo": str(hook_repo), "rev": rev,
                         "hooks": [{"id": "wrenmem-sync"}]}]}
    (user_repo / ".pre-commit-config.yaml").write_text(yaml.safe_dump(config))
    shim = tmp_path / "bin" / "wrenmem"  # wrenmem on PATH, as an installed console script
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m wrenmem \"$@\"\n")
    shim.chmod(0o755)
    env = {**pre_commit_home, "PATH": os.pathsep.join([str(shim.parent), os.environ["PATH"]])}
    assert run([sys.executable, "-m", "pre_commit", "install"], user_repo, env).returncode == 0
    assert run(["git", "add", "-A"], user_repo, env).returncode == 0
    assert run(["git", "commit", "-q", "-m", "first"], user_repo, env).returncode == 0
    assert run(["git", "checkout", "-q", "-b", "feature"], user_repo, env).returncode == 0
    log = (user_repo / ".wrenmem" / "hooks.log").read_text().splitlines()
    head = run(["git", "rev-parse", "HEAD"], user_repo).stdout.strip()
    assert [line.split(" ", 1)[1].split(":")[0] for line in log] == [
        "post-commit (pre-commit) ", f"post-checkout (pre-commit) {head} {head} 1"]
    assert all("backend is grep" in line for line in log)
    # Without wrenmem on PATH the git operation still succeeds.
    bare = {**pre_commit_home, "PATH": os.environ["PATH"]}
    done = run(["git", "checkout", "-q", "main"], user_repo, bare)
    assert done.returncode == 0, done.stderr
