"""Git hooks in real repositories: chaining, idempotency, uninstall, hooksPath, worktrees."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result
from conftest import PROCESS_TIMEOUT

from tests.conftest import REPO, run_wrenmem, write_pair
from wrenmem.git.hooks import HOOK_NAMES, MARKER, find_hook_repo, render_hook, template

LEGACY_HOOK = '#!/bin/sh\necho "legacy $*" >> "$(git rev-parse --show-toplevel)/legacy.out"\n'


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check, timeout=PROCESS_TIMEOUT)


@pytest.fixture
def repo(project: Path) -> Path:
    """``project`` as a git repository with one commit holding one pair.

    Its backend is grep, so the hooks have no index to sync and these tests of the hook
    mechanics load no model (one test below does the real sync).
    """
    git(project, "init", "-q", "-b", "main")
    (project / "wrenmem.toml").write_text('backend = "grep"\n')
    git(project, "config", "commit.gpgsign", "false")
    write_pair(project, "a.md", "Question A?", "SELECT 1 AS a")
    (project / ".gitignore").write_text(".wrenmem/\nlegacy.out\n")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "first")
    return project


def hook_log(root: Path) -> list[str]:
    path = root / ".wrenmem" / "hooks.log"
    return path.read_text().splitlines() if path.exists() else []


def wait_for_deferred(root: Path, mark: int, timeout: float = 120) -> str:
    """The log line of the deferred sync started after line ``mark`` of the hooks log."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        done = [line for line in hook_log(root)[mark:] if " deferred: " in line]
        if done:
            return done[-1]
        time.sleep(0.1)
    raise AssertionError(f"no deferred sync logged: {hook_log(root)[mark:]}")


def install(cli: Callable[..., Result], root: Path, *extra: str) -> Result:
    return cli("hooks", "install", *extra, root=root)


def assert_in_step(cli: Callable[..., Result], root: Path, after: str = "") -> Result:
    """`check --json` exits 0, run in this process as a new process would run it: the git
    hooks under test are real processes, the check of what they left need not be."""
    done = cli("check", "--json", root=root)
    assert done.exit_code == 0, f"after {after}: {done.output}"
    return done


def test_shipped_scripts_are_the_packaged_ones() -> None:
    for name in HOOK_NAMES:
        shipped = REPO / "hooks" / name
        assert shipped.read_bytes() == template(name).encode("utf-8"), name
        assert shipped.stat().st_mode & stat.S_IXUSR, f"hooks/{name} is not executable"
    assert sorted(p.name for p in (REPO / "hooks").iterdir()) == sorted(HOOK_NAMES)


def test_installed_script_is_the_shipped_one_with_paths_filled_in(repo: Path, cli) -> None:
    assert install(cli, repo).exit_code == 0
    for name in HOOK_NAMES:
        installed = (repo / ".git" / "hooks" / name).read_text().splitlines()
        shipped = (REPO / "hooks" / name).read_text().splitlines()
        differing = [(a, b) for a, b in zip(installed, shipped, strict=True) if a != b]
        assert [a.split("=")[0] for a, _ in differing] == [
            "WRENMEM_PYTHON", "WRENMEM_IMPORT_PATH"]
        assert os.access(repo / ".git" / "hooks" / name, os.X_OK)


def test_install_chains_an_existing_hook_and_uninstall_restores_it(repo: Path, cli) -> None:
    original = repo / ".git" / "hooks" / "post-checkout"
    original.write_text(LEGACY_HOOK)
    original.chmod(0o755)

    result = install(cli, repo)
    assert result.exit_code == 0, result.output
    assert "post-checkout: installed, chained post-checkout.wrenmem-legacy" in result.output
    assert MARKER in original.read_text()
    assert (repo / ".git" / "hooks" / "post-checkout.wrenmem-legacy").read_text() == LEGACY_HOOK

    git(repo, "checkout", "-q", "-b", "feature")
    # The user's hook still runs, with git's arguments; wrenmem's part ran too.
    head = git(repo, "rev-parse", "HEAD").stdout.strip()
    assert (repo / "legacy.out").read_text() == f"legacy {head} {head} 1\n"
    assert any(" post-checkout " in line for line in hook_log(repo))

    # Idempotent: a second install changes nothing and never chains our own script.
    before = {n: (repo / ".git" / "hooks" / n).read_bytes() for n in HOOK_NAMES}
    again = install(cli, repo)
    assert again.exit_code == 0
    assert again.output.count(": unchanged") == len(HOOK_NAMES)
    assert {n: (repo / ".git" / "hooks" / n).read_bytes() for n in HOOK_NAMES} == before
    assert (repo / ".git" / "hooks" / "post-checkout.wrenmem-legacy").read_text() == LEGACY_HOOK

    result = cli("hooks", "uninstall", root=repo)
    assert result.exit_code == 0
    assert original.read_text() == LEGACY_HOOK
    assert os.access(original, os.X_OK)
    assert not (repo / ".git" / "hooks" / "post-checkout.wrenmem-legacy").exists()
    for name in ("post-merge", "post-rewrite", "post-commit", "reference-transaction"):
        assert not (repo / ".git" / "hooks" / name).exists()


def test_the_chained_hooks_exit_status_is_kept(repo: Path, cli) -> None:
    hook = repo / ".git" / "hooks" / "post-checkout"
    hook.write_text("#!/bin/sh\necho 'legacy says no' >&2\nexit 3\n")
    hook.chmod(0o755)
    install(cli, repo)
    done = git(repo, "checkout", "-q", "-b", "other", check=False)
    assert done.returncode == 1  # git turns a failing post-checkout into exit status 1
    assert "legacy says no" in done.stderr


def test_each_hook_fires_on_its_git_operation(repo: Path, cli) -> None:
    assert install(cli, repo).exit_code == 0

    def commit(rel: str, question: str) -> None:
        write_pair(repo, rel, question, "SELECT 1 AS one")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", rel)

    def hooks_since(mark: int) -> list[str]:  # reference-transaction: see the tests below
        return [line.split()[1] for line in hook_log(repo)[mark:]
                if line.split()[1] != "reference-transaction"]

    git(repo, "checkout", "-q", "-b", "feature")
    commit("b.md", "Question B?")
    git(repo, "checkout", "-q", "main")
    commit("c.md", "Question C?")
    assert hooks_since(0) == ["post-checkout", "post-commit", "post-checkout", "post-commit"]
    mark = len(hook_log(repo))
    git(repo, "merge", "-q", "--no-edit", "feature")
    assert hooks_since(mark) == ["post-merge"]

    git(repo, "checkout", "-q", "feature")
    commit("d.md", "Question D?")
    mark = len(hook_log(repo))
    git(repo, "rebase", "-q", "main")
    # While the rebase replays commits, its hooks leave the sync to post-rewrite, once.
    rebase = [line for line in hook_log(repo)[mark:] if " post-rewrite " in line]
    hooks = [h for h in hooks_since(mark) if h != "deferred:"]  # the waiter may log first
    assert hooks[-1] == "post-rewrite" and " rebase: " in rebase[-1]
    assert all("rebase in progress" in line for line in hook_log(repo)[mark:]
               if " post-commit " in line or " post-checkout " in line)
    assert "rebase in progress" not in rebase[-1]
    wait_for_deferred(repo, mark)  # the waiter the replayed commits' hooks started
    mark = len(hook_log(repo))
    git(repo, "commit", "-q", "--amend", "-m", "amended")
    assert hooks_since(mark) == ["post-commit", "post-rewrite"]


def test_core_hooks_path_is_respected(repo: Path, cli) -> None:
    git(repo, "config", "core.hooksPath", ".githooks")
    result = install(cli, repo)
    assert result.exit_code == 0
    assert "core.hooksPath is set" in result.output
    assert all((repo / ".githooks" / n).is_file() for n in HOOK_NAMES)
    assert not (repo / ".git" / "hooks" / "post-checkout").exists()
    git(repo, "checkout", "-q", "-b", "feature")
    assert any(" post-checkout " in line for line in hook_log(repo))
    status = cli("hooks", "status", "--json", root=repo)
    assert status.exit_code == 0
    data = json.loads(status.output)
    assert data["hooks_path"] == ".githooks"
    assert Path(data["hooks_dir"]) == (repo / ".githooks").resolve()


def test_linked_worktree_uses_the_common_hooks_dir(repo: Path, cli, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", str(wt), "-b", "wt-branch")
    target = find_hook_repo(wt)
    assert target.hooks_dir == (repo / ".git" / "hooks").resolve()
    assert target.worktree == wt.resolve()
    assert install(cli, wt).exit_code == 0
    assert (repo / ".git" / "hooks" / "post-checkout").is_file()
    git(wt, "checkout", "-q", "-b", "wt-two")
    # The hook ran in the worktree, for the worktree's own project.
    assert any(" post-checkout " in line for line in hook_log(wt))
    assert hook_log(repo) == []


def test_project_in_a_subfolder_of_the_repository(tmp_path: Path, cli) -> None:
    top = tmp_path / "mono"
    sub = top / "analytics"
    (sub / "knowledge" / "sql").mkdir(parents=True)
    (sub / "wrenmem.toml").write_text('backend = "grep"\n')
    git(top, "init", "-q", "-b", "main")
    git(top, "commit", "-q", "--allow-empty", "-m", "first")
    assert install(cli, sub).exit_code == 0
    assert "WRENMEM_PROJECT_DIR=analytics" in (top / ".git/hooks/post-merge").read_text()
    git(top, "checkout", "-q", "-b", "x")
    assert any(" post-checkout " in line for line in hook_log(sub))


def test_a_broken_project_never_fails_the_git_operation(repo: Path, cli) -> None:
    install(cli, repo)
    (repo / "wrenmem.toml").write_text("backend = 'nope'\n")
    done = git(repo, "checkout", "-b", "feature", check=False)
    assert done.returncode == 0
    lines = [line for line in done.stderr.splitlines() if line.startswith("wrenmem:")]
    assert len(lines) == 1 and "index not synced" in lines[0] and "backend" in lines[0]


def test_status_reports_missing_and_foreign_hooks(repo: Path, cli) -> None:
    assert cli("hooks", "status", root=repo).exit_code == 1
    install(cli, repo)
    result = cli("hooks", "status", root=repo)
    assert result.exit_code == 0
    assert result.output.count("installed") == len(HOOK_NAMES)
    (repo / ".git" / "hooks" / "post-merge").write_text("#!/bin/sh\necho someone else\n")
    result = cli("hooks", "status", "--json", root=repo)
    assert result.exit_code == 1
    states = {h["name"]: h["state"] for h in json.loads(result.output)["hooks"]}
    assert states == {"post-checkout": "ours", "post-merge": "foreign",
                      "post-rewrite": "ours", "post-commit": "ours",
                      "reference-transaction": "ours"}


def _bare_python(tmp_path: Path) -> Path:
    """A Python that has wrenmem's dependencies but not wrenmem: a venv whose one ``.pth``
    names this interpreter's site-packages (an editable install's finder is a ``.pth`` of
    its own there, which a plain path entry does not run), as on a machine where wrenmem
    was never installed, only checked out."""
    import sysconfig

    venv = tmp_path / "bare-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=PROCESS_TIMEOUT)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()"
                           "['purelib'])"], capture_output=True, text=True,
                          check=True, timeout=PROCESS_TIMEOUT).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _clean_env(**extra: str) -> dict[str, str]:
    """What a git GUI or a fresh shell gives a hook: no PYTHONPATH, no venv on PATH."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PATH"] = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                  if not (Path(p) / "wrenmem").exists())
    return {**env, **extra}


def test_the_hook_imports_the_installing_wrenmem_and_shadows_nothing(repo: Path,
                                                                     tmp_path: Path) -> None:
    """The recorded import path is the folder holding the package: the hook's Python finds
    this wrenmem with nothing else on PYTHONPATH, and wrenmem's subpackages (``git``,
    ``mcp``) never stand in for the top-level modules of those names."""
    python = _bare_python(tmp_path)
    done = subprocess.run([str(python), "-m", "wrenmem", "--project", str(repo), "hooks",
                           "install"], env=_clean_env(PYTHONPATH=str(REPO)), cwd=repo,
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr
    text = (repo / ".git" / "hooks" / "post-checkout").read_text()
    recorded = [line.partition("=")[2].strip("'") for line in text.splitlines()
                if line.startswith("WRENMEM_IMPORT_PATH=")]
    assert recorded == [str(REPO)]
    probe = subprocess.run(
        [str(python), "-c", "import wrenmem, git, mcp; print(wrenmem.__file__); "
                            "print(git.__file__); print(mcp.__file__)"],
        env=_clean_env(PYTHONPATH=recorded[0]), cwd=repo, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert probe.returncode == 0, probe.stderr
    found = [Path(line) for line in probe.stdout.split()]
    assert found[0] == REPO / "wrenmem" / "__init__.py"
    assert not any(p.is_relative_to(REPO / "wrenmem") for p in found[1:]), found

    mark = len(hook_log(repo))
    fired = git_clean(repo, "checkout", "-q", "-b", "feature")
    assert "not installed" not in fired.stderr, fired.stderr
    assert [line for line in hook_log(repo)[mark:] if " post-checkout " in line
            and "FAILED" not in line], (fired.stderr, hook_log(repo))


def git_clean(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True, env=_clean_env(), timeout=PROCESS_TIMEOUT)


def test_status_runs_the_hooks_python(repo: Path, tmp_path: Path) -> None:
    """``hooks status`` runs the recorded Python the way the hook does: a Python that can no
    longer run wrenmem (its packages gone) is reported, and status exits 1."""
    python = _bare_python(tmp_path)
    env = _clean_env(PYTHONPATH=str(REPO))
    install = subprocess.run([str(python), "-m", "wrenmem", "--project", str(repo), "hooks",
                              "install"], env=env, cwd=repo, capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert install.returncode == 0, install.stderr

    def status() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "wrenmem", "--project", str(repo),
                               "hooks", "status"], env=env, cwd=repo, capture_output=True,
                              text=True, timeout=PROCESS_TIMEOUT)

    assert status().returncode == 0, status().stdout
    for pth in python.parent.parent.glob("lib/python*/site-packages/deps.pth"):
        pth.unlink()  # the hook's Python still exists, but cannot run wrenmem any more
    broken = status()
    assert broken.returncode == 1, broken.stdout
    assert "cannot run wrenmem" in broken.stdout, broken.stdout


def test_install_never_loses_a_foreign_hook(repo: Path, cli) -> None:
    install(cli, repo)
    hooks_dir = repo / ".git" / "hooks"
    # Another tool replaced our hook, and a chained hook is already there: refuse, keep both.
    (hooks_dir / "post-merge").write_text("#!/bin/sh\necho other tool\n")
    (hooks_dir / "post-merge.wrenmem-legacy").write_text("#!/bin/sh\necho oldest\n")
    result = install(cli, repo)
    assert result.exit_code == 1
    assert "post-merge" in result.output and "is taken" in result.output
    assert (hooks_dir / "post-merge").read_text() == "#!/bin/sh\necho other tool\n"
    assert (hooks_dir / "post-merge.wrenmem-legacy").read_text() == "#!/bin/sh\necho oldest\n"
    assert MARKER in (hooks_dir / "post-checkout").read_text()


def test_not_a_git_repository(project: Path, cli) -> None:
    result = cli("hooks", "install", root=project)
    assert result.exit_code == 1
    assert "not inside a git repository: run `git init` there first" in result.output


def test_render_hook_quotes_paths() -> None:
    text = render_hook("post-merge", "/opt/my python/bin/python", "it's here")
    assert "WRENMEM_PYTHON='/opt/my python/bin/python'" in text
    assert "WRENMEM_PROJECT_DIR='it'\"'\"'s here'" in text


def test_the_template_is_render_hook_with_nothing_filled_in() -> None:
    for name in HOOK_NAMES:
        assert render_hook(name, "", ".", "") == template(name)


@pytest.mark.slow
def test_switching_branches_keeps_the_index_in_step(example_project: Path, cli) -> None:
    """The user story: sync once, install the hooks, then only use git; `check` stays clean.
    (The first sync runs in this process: the hooks' syncs are the processes under test.)"""
    root = example_project
    env = {"PYTHONPATH": str(REPO)}
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".wrenmem/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "example")
    assert cli("sync", root=root).exit_code == 0
    assert run_wrenmem(["hooks", "install"], root).returncode == 0

    def check_clean() -> None:
        assert_in_step(cli, root)

    git(root, "checkout", "-q", "-b", "feature")
    knowledge = root / "knowledge" / "sql"
    write_pair(root, "new-question.md", "How many stores are there?",
               "SELECT COUNT(*) FROM stores")
    edited = knowledge / "total-payment-amount-by-payment-method.md"
    edited.write_text(edited.read_text().replace(
        "nl: Total payment amount by payment method", "nl: Payment totals per method"))
    (knowledge / "total-refunded-amount-by-month.md").unlink()
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "pairs: one added, one edited, one deleted")  # post-commit
    check_clean()
    git(root, "checkout", "-q", "main")  # post-checkout: back to the old pairs
    check_clean()
    git(root, "merge", "-q", "--ff-only", "feature")  # post-merge
    check_clean()
    git(root, "reset", "-q", "--hard", "HEAD~1")  # reference-transaction: HEAD moved
    check_clean()

    # --background: git returns before the sync is done; it lands in the log a bit later.
    assert run_wrenmem(["hooks", "install", "--background"], root).returncode == 0
    before = len(hook_log(root))
    started = time.monotonic()
    subprocess.run(["git", "checkout", "-q", "feature"], cwd=root, check=True,
                   env={**os.environ, **env}, timeout=PROCESS_TIMEOUT)
    while len(hook_log(root)) == before and time.monotonic() - started < 120:
        time.sleep(0.2)
    assert "synced: 1 added, 1 changed, 1 removed" in hook_log(root)[-1]
    check_clean()
    assert all("FAILED" not in line for line in hook_log(root))


def test_a_hook_builds_a_missing_schema_index(example_project: Path, cli) -> None:
    """No `wrenmem sync` ever ran: the first checkout's hook builds the pairs' index and the
    manifest's schema index, so `check` is clean without a manual sync."""
    root = example_project
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".wrenmem/\n")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "example")
    assert install(cli, root).exit_code == 0
    git(root, "checkout", "-q", "-b", "feature")  # post-checkout
    assert "schema synced" in hook_log(root)[-1], hook_log(root)
    done = assert_in_step(cli, root)
    assert json.loads(done.stdout)["schema"]["fresh"]


PRE_COMMIT_CONFIG = """\
repos:
  - repo: local
    hooks:
      - id: say
        name: say
        entry: sh -c 'echo pre-commit-ran >> pc.out'
        language: system
        always_run: true
        pass_filenames: false
        stages: [post-checkout]
"""


@pytest.mark.parametrize("order", ["pre-commit first", "wrenmem first"])
def test_works_with_pre_commits_own_post_checkout_hook(repo: Path, cli, tmp_path: Path,
                                                       order: str) -> None:
    (repo / ".pre-commit-config.yaml").write_text(PRE_COMMIT_CONFIG)
    (repo / ".gitignore").write_text(".wrenmem/\npc.out\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "pre-commit config")
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pc-home")}

    def pre_commit_install() -> None:
        subprocess.run([sys.executable, "-m", "pre_commit", "install", "--hook-type",
                        "post-checkout"], cwd=repo, env=env, check=True, capture_output=True, timeout=PROCESS_TIMEOUT)

    if order == "pre-commit first":
        pre_commit_install()
        assert install(cli, repo).exit_code == 0
    else:
        assert install(cli, repo).exit_code == 0
        pre_commit_install()  # pre-commit moves wrenmem's script to its own .legacy
    done = subprocess.run(["git", "checkout", "-q", "-b", "feature"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert (repo / "pc.out").read_text() == "pre-commit-ran\n"
    assert [line.split()[1] for line in hook_log(repo)] == ["post-checkout"]

    # Installing again changes nothing, and each hook still runs once.
    again = install(cli, repo)
    assert again.exit_code == 0 and again.output.count("unchanged") == len(HOOK_NAMES)
    assert cli("hooks", "status", root=repo).exit_code == 0
    assert git(repo, "checkout", "-q", "main", check=False).returncode == 0
    assert (repo / "pc.out").read_text() == "pre-commit-ran\n" * 2
    assert len(hook_log(repo)) == 2

    # Uninstall leaves pre-commit's hook working, and wrenmem's no longer runs.
    assert cli("hooks", "uninstall", root=repo).exit_code == 0
    hooks_dir = repo / ".git" / "hooks"
    assert not any(MARKER in p.read_text() for p in hooks_dir.iterdir() if p.is_file()
                   and not p.name.endswith(".sample"))
    done = subprocess.run(["git", "checkout", "-q", "feature"], cwd=repo, env=env,
                          capture_output=True, text=True, timeout=PROCESS_TIMEOUT)
    assert done.returncode == 0, done.stderr
    assert (repo / "pc.out").read_text() == "pre-commit-ran\n" * 3
    assert len(hook_log(repo)) == 2


@pytest.mark.slow
def test_every_history_change_leaves_the_index_in_step(project: Path, tmp_path: Path,
                                                      cli) -> None:
    """Fast-forward rebase, pull --rebase, reset --hard, stash pop and a cherry-pick sequence:
    after each (and the deferred sync it may have started), `check` exits 0."""
    origin = tmp_path / "origin.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    root = project
    git(root, "init", "-q", "-b", "main")
    (root / ".gitignore").write_text(".wrenmem/\n")
    write_pair(root, "a.md", "How many orders are there?", "SELECT COUNT(*) FROM orders")
    write_pair(root, "b.md", "Revenue per store", "SELECT store_id, SUM(amount) FROM orders "
                                                  "GROUP BY store_id")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "two pairs")
    git(root, "remote", "add", "origin", str(origin))
    git(root, "push", "-q", "-u", "origin", "main")
    assert cli("sync", root=root).exit_code == 0
    assert install(cli, root).exit_code == 0

    def commit(rel: str, question: str, cwd: Path = root) -> None:
        write_pair(cwd, rel, question, f"SELECT '{rel}' AS pair")
        git(cwd, "add", "-A")
        git(cwd, "commit", "-q", "-m", rel)

    def in_step(after: str, mark: int | None = None) -> None:
        if mark is not None:
            wait_for_deferred(root, mark)
        assert_in_step(cli, root, after)

    # A fast-forward rebase: git runs no post-rewrite; a deferred sync catches it.
    git(root, "checkout", "-q", "-b", "feature")
    git(root, "checkout", "-q", "main")
    commit("c.md", "Customers per country")
    git(root, "checkout", "-q", "feature")
    mark = len(hook_log(root))
    git(root, "rebase", "-q", "main")
    assert (root / "knowledge" / "sql" / "c.md").exists()
    in_step("a fast-forward rebase", mark)

    # pull --rebase, the branch behind its upstream.
    git(root, "checkout", "-q", "main")
    git(root, "push", "-q", "origin", "main")
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", str(origin), str(other))
    commit("d.md", "Orders per day", cwd=other)
    git(other, "push", "-q", "origin", "main")
    mark = len(hook_log(root))
    git(root, "pull", "-q", "--rebase", "origin", "main")
    assert (root / "knowledge" / "sql" / "d.md").exists()
    if any(" deferred" in line or "in progress" in line for line in hook_log(root)[mark:]):
        in_step("pull --rebase", mark)
    else:
        in_step("pull --rebase")

    # reset --hard: no post-* hook runs; reference-transaction sees HEAD move.
    git(root, "reset", "-q", "--hard", "HEAD~1")
    assert not (root / "knowledge" / "sql" / "d.md").exists()
    in_step("reset --hard")

    # stash, then stash pop: the pair's edit comes back. (Some shared machines wrap git to
    # refuse `stash`, whose stack all worktrees share: then this step cannot run.)
    pair = root / "knowledge" / "sql" / "a.md"
    pair.write_text(pair.read_text().replace("How many orders", "How many orders in total"))
    assert cli("sync", root=root).exit_code == 0
    if git(root, "stash", "list", check=False).returncode == 0:
        git(root, "stash", "-q")
        in_step("stash")
        git(root, "stash", "pop", "-q")
        assert "in total" in pair.read_text()
        in_step("stash pop")
    git(root, "reset", "-q", "--hard")  # discards the edit: HEAD "moves" to itself
    assert "in total" not in pair.read_text()
    in_step("reset --hard to HEAD")

    # A cherry-pick sequence: post-commit per commit, no hook after the last step.
    git(root, "checkout", "-q", "-b", "picks")
    commit("e.md", "Products per category")
    commit("f.md", "Stores per city")
    git(root, "checkout", "-q", "main")
    mark = len(hook_log(root))
    git(root, "cherry-pick", "picks~1", "picks")
    assert (root / "knowledge" / "sql" / "f.md").exists()
    in_step("a cherry-pick sequence", mark)
    assert all("FAILED" not in line for line in hook_log(root))


def test_reference_transaction_acts_only_when_head_moves(repo: Path, cli) -> None:
    legacy = repo / ".git" / "hooks" / "reference-transaction"
    legacy.write_text('#!/bin/sh\necho "$1 $(cat | wc -l)" >> "$(git rev-parse --show-toplevel)'
                      '/legacy.out"\n')
    legacy.chmod(0o755)
    assert install(cli, repo).exit_code == 0

    def ref_lines() -> list[str]:
        return [line for line in hook_log(repo) if " reference-transaction " in line]

    git(repo, "branch", "other")  # a new ref, HEAD untouched: nothing to sync
    git(repo, "tag", "v1")
    assert ref_lines() == []
    # The chained hook still sees every state with git's stdin.
    assert (repo / "legacy.out").read_text().splitlines()[:2] == ["prepared 1", "committed 1"]
    git(repo, "reset", "-q", "--hard")
    assert len(ref_lines()) == 1 and " reference-transaction committed: " in ref_lines()[0]

