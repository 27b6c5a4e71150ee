"""Git hooks that keep the index in step with the pair files: install, uninstall, status, run.

The scripts in ``wrenmem/git/hook_scripts/`` (copied in the top-level ``hooks/``) are
written into the hooks directory git uses, with the installing Python and the project folder
filled in. As in pre-commit, a marker line makes a script ours; a hook already there moves
to ``<name>.wrenmem-legacy`` (not ``.legacy``, which pre-commit's own script runs), is run
first by ours, and is put back by uninstall."""

from __future__ import annotations

import datetime as dt
import logging
import os
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from wrenmem.errors import WrenmemError
from wrenmem.fs import statedir
from wrenmem.fs.fsutil import atomic_write_text, git_output
from wrenmem.index.sync import SyncReport, sync_pairs
from wrenmem.knowledge.files import load_knowledge
from wrenmem.knowledge.table import read_state as read_knowledge_state
from wrenmem.knowledge.table import sync_knowledge
from wrenmem.schema.table import sync_schema
from wrenmem.settings import Settings
from wrenmem.storage.lance import index_unavailable
from wrenmem.storage.lock import is_locked

log = logging.getLogger(__name__)
# Runs a hook's sync of the pairs elsewhere (the watcher) or returns None: sync here.
Handoff = Callable[[], SyncReport | None]

HOOK_NAMES = ("post-checkout", "post-merge", "post-rewrite", "post-commit",
              "reference-transaction")
DEFERRED = "deferred"  # `hooks run deferred`: the waiter a hook starts during a rebase
DEFER_POLL = 0.2  # seconds between looks at whether the rebase or sequence has ended
DEFER_TIMEOUT = 6 * 3600.0  # a rebase left stopped for longer is synced by its next hook
MARKER = "wrenmem-hook-v1"
LEGACY_SUFFIX = ".wrenmem-legacy"
# Where pre-commit (and installers that copy it) move a hook they replace, and run it from.
OTHERS_LEGACY_SUFFIX = ".legacy"
LOG_NAME = statedir.HOOKS_LOG
DEFER_LOCK = statedir.HOOKS_DEFERRED
LOG_MAX_BYTES = 1_000_000
HOOK_LOCK_TIMEOUT = 20.0  # another sync (the watcher) holding the lock will see the files too
_TEMPLATE_START = "# start templated\n"
_TEMPLATE_END = "# end templated\n"


@dataclass(frozen=True)
class HookState:
    """What one hook file is, for ``status`` and as the result of install/uninstall."""

    name: str
    path: str
    state: str  # ours | chained (ours, run by another tool's hook) | foreign | absent
    legacy: bool  # a chained <name>.wrenmem-legacy exists
    python: str | None = None  # interpreter recorded in our script
    python_ok: bool = False  # that interpreter still exists
    current: bool = False  # our script matches what install would write now
    action: str = ""  # what install/uninstall did: installed, updated, unchanged, ...
    background: bool = False  # the script syncs in the background
    import_path: str | None = None  # WRENMEM_IMPORT_PATH recorded in our script

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class HookRepo:
    """Where hooks go for a project: the hooks directory and the project's place in the tree."""

    hooks_dir: Path
    worktree: Path
    project_dir: str  # project root relative to the top of the working tree, posix
    hooks_path: str | None = None  # core.hooksPath, when it is set


def template(name: str) -> str:
    """The packaged script for hook ``name`` (the same bytes as ``hooks/<name>``)."""
    if name not in HOOK_NAMES:
        raise WrenmemError(f"unknown hook {name!r}; wrenmem has {', '.join(HOOK_NAMES)}")
    return (Path(__file__).parent / "hook_scripts" / name).read_text(encoding="utf-8")


def import_path() -> str:
    """The folder holding this ``wrenmem`` package (site-packages or a checkout): what goes
    on a hook's ``PYTHONPATH``. Never the package folder itself, whose subpackages ``git``
    and ``mcp`` would stand in for the top-level modules of those names."""
    return str(Path(__file__).resolve().parents[2])


def render_hook(name: str, python: str, project_dir: str = ".",
                package_path: str | None = None, background: bool = False) -> str:
    """The script ``install`` writes: the template with the interpreter and project filled in."""
    text = template(name)
    start = text.index(_TEMPLATE_START) + len(_TEMPLATE_START)
    end = text.index(_TEMPLATE_END)
    package = import_path() if package_path is None else package_path
    block = (f"WRENMEM_PYTHON={shlex.quote(python)}\n"
             f"WRENMEM_IMPORT_PATH={shlex.quote(package)}\n"
             f"WRENMEM_PROJECT_DIR={shlex.quote(project_dir)}\n"
             f"WRENMEM_BACKGROUND={int(background)}\n")
    return text[:start] + block + text[end:]


def find_hook_repo(project_root: Path) -> HookRepo:
    """The hooks directory git uses for ``project_root`` (``core.hooksPath`` and worktrees)."""
    import git

    try:
        repo = git.Repo(project_root, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError) as e:
        raise WrenmemError(f"{project_root} is not inside a git repository: run `git init` "
                           "there first (the hooks are git's)") from e
    if repo.bare or repo.working_tree_dir is None:
        raise WrenmemError(f"{project_root}: a bare repository has no working tree to sync")
    worktree = Path(repo.working_tree_dir).resolve()
    # `git rev-parse --git-path hooks` is git's own answer: core.hooksPath when set (relative
    # to the working tree), else the common .git/hooks even from a linked worktree.
    raw = repo.git.rev_parse("--git-path", "hooks")
    hooks_dir = (worktree / raw).resolve() if not os.path.isabs(raw) else Path(raw).resolve()
    try:
        project_dir = project_root.resolve().relative_to(worktree).as_posix()
    except ValueError as e:
        raise WrenmemError(f"{project_root} is outside the working tree {worktree}") from e
    try:
        hooks_path: str | None = repo.git.config("--get", "core.hooksPath") or None
    except git.GitCommandError:  # exit 1: not set
        hooks_path = None
    return HookRepo(hooks_dir, worktree, project_dir or ".", hooks_path)


def is_ours(path: Path) -> bool:
    """True if ``path`` is a script wrenmem wrote (it carries the marker line)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return MARKER.encode() in head


def _recorded(text: str, name: str) -> str | None:
    """The value a templated ``NAME=...`` line of an installed script holds."""
    for line in text.splitlines():
        if line.startswith(name + "="):
            values = shlex.split(line.partition("=")[2])
            return values[0] if values else None
    return None


def hook_state(target: HookRepo, name: str, python: str | None = None,
               action: str = "") -> HookState:
    """Describe hook ``name`` in ``target``; ``current`` compares with what install writes."""
    path = target.hooks_dir / name
    legacy = os.path.lexists(str(path) + LEGACY_SUFFIX)
    state = "ours"
    if not os.path.lexists(path):
        return HookState(name, str(path), "absent", legacy, action=action)
    if not is_ours(path):
        if not is_ours(_others_legacy(path)):
            return HookState(name, str(path), "foreign", legacy, action=action)
        path, state = _others_legacy(path), "chained"
    text = path.read_text(encoding="utf-8", errors="replace")
    recorded = _recorded(text, "WRENMEM_PYTHON")
    background = _recorded(text, "WRENMEM_BACKGROUND") == "1"
    expected = render_hook(name, python or recorded or "", target.project_dir,
                           background=background)
    return HookState(name, str(path), state, legacy, recorded,
                     recorded is not None and os.access(recorded, os.X_OK),
                     text == expected and os.access(path, os.X_OK), action, background,
                     _recorded(text, "WRENMEM_IMPORT_PATH"))


def python_problem(state: HookState, worktree: Path) -> str | None:
    """Why the Python ``state``'s script records cannot run wrenmem (None when it
    can): runs ``python -m wrenmem --version`` as the hook does, from the working tree's top
    with the recorded import path as the only ``PYTHONPATH``."""
    import subprocess

    if not state.python or not state.python_ok:
        return f"its python {state.python or '(none)'} is gone"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if state.import_path:
        env["PYTHONPATH"] = state.import_path
    try:
        done = subprocess.run([state.python, "-m", "wrenmem", "--version"], cwd=worktree,
                              env=env, capture_output=True, text=True, timeout=60,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"its python {state.python} does not run: {e}"
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return (f"its python {state.python} cannot run wrenmem"
                + (f" ({lines[-1].strip()})" if lines else ""))
    return None


def install_hooks(target: HookRepo, python: str | None = None,
                  names: tuple[str, ...] = HOOK_NAMES, *,
                  background: bool = False) -> list[HookState]:
    """Write our hooks, chaining a foreign one as ``<name>.wrenmem-legacy``;
    idempotent. A foreign hook is never lost: when that name is taken too, that hook is refused
    (:class:`HookConflict`, after the others are installed)."""
    python = python or sys.executable
    target.hooks_dir.mkdir(parents=True, exist_ok=True)
    results: list[HookState] = []
    refused: list[str] = []
    for name in names:
        path = target.hooks_dir / name
        legacy = Path(str(path) + LEGACY_SUFFIX)
        text = render_hook(name, python, target.project_dir, background=background)
        if os.path.lexists(path) and not is_ours(path) and is_ours(_others_legacy(path)):
            # Another tool (pre-commit's migration mode) put its hook here and runs ours as
            # <name>.legacy: update ours in place; moving theirs would make them run each other.
            path = _others_legacy(path)
            same = path.read_text(encoding="utf-8", errors="replace") == text
            action = "unchanged" if same else "updated"
            action += f" (run by another tool's {name} hook as {path.name})"
        elif os.path.lexists(path) and not is_ours(path):
            if os.path.lexists(legacy):
                refused.append(f"{path}: a hook that is not wrenmem's is there and {legacy.name}"
                               " is taken too; move one of them away and install again")
                results.append(hook_state(target, name, python, "refused"))
                continue
            os.replace(path, legacy)
            action = "installed, chained " + legacy.name
        elif os.path.lexists(path):
            same = path.read_text(encoding="utf-8", errors="replace") == text
            action = "unchanged" if same and os.access(path, os.X_OK) else "updated"
        else:
            action = "installed"
        if not action.startswith("unchanged"):
            atomic_write_text(path, text)
            path.chmod(path.stat().st_mode | 0o755)
        results.append(hook_state(target, name, python, action))
    if refused:
        raise HookConflict("; ".join(refused), results)
    return results


class HookConflict(WrenmemError):
    """Some hooks could not be installed without losing a foreign hook."""

    def __init__(self, message: str, results: list[HookState]):
        super().__init__(message)
        self.results = results


def uninstall_hooks(target: HookRepo, names: tuple[str, ...] = HOOK_NAMES) -> list[HookState]:
    """Remove our hooks and put back each chained hook. Foreign hooks are left alone."""
    results: list[HookState] = []
    for name in names:
        path = target.hooks_dir / name
        legacy = Path(str(path) + LEGACY_SUFFIX)
        if os.path.lexists(path) and not is_ours(path) and is_ours(_others_legacy(path)):
            # Ours runs as another tool's <name>.legacy: hand that tool the hook ours chained.
            _others_legacy(path).unlink()
            if os.path.lexists(legacy):
                os.replace(legacy, _others_legacy(path))
            action = f"removed (it was run by another tool's {name} hook)"
        elif os.path.lexists(path) and not is_ours(path):
            action = "not wrenmem's: left alone"
        else:
            existed = os.path.lexists(path)
            if existed:
                path.unlink()
            if os.path.lexists(legacy):
                os.replace(legacy, path)
                action = "removed, restored previous hook" if existed else "restored previous hook"
            else:
                action = "removed" if existed else "not installed"
        results.append(hook_state(target, name, action=action))
    return results


def _others_legacy(path: Path) -> Path:
    return Path(str(path) + OTHERS_LEGACY_SUFFIX)


# ---- what a hook does when git runs it ---------------------------------------------------------


def pre_commit_stage(environ: Mapping[str, str]) -> str:
    """The git hook the pre-commit framework is running, from the variables it sets."""
    if "PRE_COMMIT_CHECKOUT_TYPE" in environ:
        return "post-checkout"
    if "PRE_COMMIT_IS_SQUASH_MERGE" in environ:
        return "post-merge"
    if "PRE_COMMIT_REWRITE_COMMAND" in environ:
        return "post-rewrite"
    return "post-commit"


def run_hook(settings: Settings, name: str, args: tuple[str, ...], *,
             handoff: Handoff | None = None) -> str | None:
    """Sync the index after git hook ``name``, logged to ``.wrenmem/hooks.log``: None, or a
    one-line reason (the traceback in the log); never raises. "pre-commit": the pre-commit
    framework runs us, and its environment says which git hook."""
    if name == "pre-commit":
        name = pre_commit_stage(os.environ) + " (pre-commit)"
        args = tuple(os.environ.get(v, "") for v in (
            "PRE_COMMIT_FROM_REF", "PRE_COMMIT_TO_REF", "PRE_COMMIT_CHECKOUT_TYPE",
            "PRE_COMMIT_REWRITE_COMMAND") if v in os.environ)
    started = time.monotonic()
    log_path = settings.state_dir / LOG_NAME
    try:
        if not settings.knowledge_path.is_dir():
            if settings.state_dir.is_dir():  # a global core.hooksPath runs us in every
                # repository: one that is not a wrenmem project gets no .wrenmem/ of ours
                _log(log_path,
                     f"{name} {' '.join(args)}: no {settings.knowledge_dir}/, nothing to do")
            return None
        if name == DEFERRED:
            return _run_deferred(settings, log_path, started, handoff)
        operation = in_progress(settings.root)
        if name.split()[0] in DEFERRING_HOOKS and operation:
            # A rebase or cherry-pick sequence runs post-commit per commit, and no hook at
            # all after the last step of some: one waiter syncs once it ended.
            started_waiter = start_deferred_sync(settings)
            _log(log_path, f"{name} {' '.join(args)}: {operation} in progress, "
                           + ("a deferred sync waits for its end" if started_waiter
                              else "the deferred sync already waiting will sync"))
            return None
        summary = _sync(settings, handoff)
    except BaseException as e:  # a hook must never fail the git operation, whatever happened
        if isinstance(e, KeyboardInterrupt):
            return "interrupted"
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        _log(log_path, f"{name} {' '.join(args)}: FAILED: {reason}\n"
                       + "".join(traceback.format_exception(e)).rstrip())
        return reason
    _log(log_path, f"{name} {' '.join(args)}: {summary} "
                   f"({time.monotonic() - started:.2f}s)")
    return None


# Hooks that git may run in the middle of a multi-step operation: they leave the sync to one
# deferred waiter. post-rewrite and post-merge run when their operation is over.
DEFERRING_HOOKS = ("post-commit", "post-checkout", "reference-transaction")
_OPERATION_DIRS = (("rebase-merge", "rebase"), ("rebase-apply", "rebase"),
                   ("sequencer", "cherry-pick or revert sequence"))


def in_progress(root: Path) -> str | None:
    """The multi-step git operation running in the working tree of ``root``, if any."""
    args = [a for name, _ in _OPERATION_DIRS for a in ("--git-path", name)]
    paths = git_output(root, "rev-parse", *args) or ""
    for line, (_, label) in zip(paths.splitlines(), _OPERATION_DIRS, strict=False):
        if line and (root / line).is_dir():
            return label
    return None


def start_deferred_sync(settings: Settings) -> bool:
    """Start the waiter that syncs when the running rebase or sequence ends, unless one is
    already waiting. Detached: git does not wait for it, and it outlives the hook."""
    import subprocess

    if is_locked(settings.state_dir / DEFER_LOCK, exclusive=False):
        return False
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (import_path(), os.environ.get("PYTHONPATH", "")) if p)}
    for name in ("GIT_DIR", "GIT_INDEX_FILE", "GIT_WORK_TREE"):
        env.pop(name, None)  # git sets them for its hooks; the waiter outlives this operation
    subprocess.Popen([sys.executable, "-m", "wrenmem", "--project", str(settings.root),
                      "hooks", "run", DEFERRED], cwd=settings.root, env=env,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL, start_new_session=True, close_fds=True)
    return True


def _run_deferred(settings: Settings, log_path: Path, started: float,
                  handoff: Handoff | None = None) -> str | None:
    """The waiter: hold the deferred lock, wait for the operation to end, then sync."""
    import fcntl

    path = settings.state_dir / DEFER_LOCK
    statedir.ensure_parent(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return None  # another waiter got there first; it will sync
        while True:
            operation = in_progress(settings.root)
            while operation is not None and time.monotonic() - started < DEFER_TIMEOUT:
                time.sleep(DEFER_POLL)
                operation = in_progress(settings.root)
            if operation is not None:
                _log(log_path, f"{DEFERRED}: {operation} still in progress after "
                               f"{DEFER_TIMEOUT / 3600:.0f} h; its next hook syncs")
                return None
            summary = _sync(settings, handoff)
            # Another rebase may have started while this one synced: its hooks saw this
            # waiter holding the lock and left the sync to it.
            if in_progress(settings.root) is None:
                break
    finally:
        os.close(fd)
    _log(log_path, f"{DEFERRED}: {summary} ({time.monotonic() - started:.2f}s)")
    return None


def _sync(settings: Settings, handoff: Handoff | None = None) -> str:
    """The incremental sync of the project, described (a no-op opens neither index nor
    model); nothing for a grep-only project. ``handoff``: asked first (the watcher)."""
    if settings.backend == "grep":
        return "backend is grep: no index to sync"

    reason = index_unavailable(settings)
    if reason is not None:
        return f"no index to sync: {reason}"

    handed = handoff() if handoff is not None else None
    summary = (handed or sync_pairs(settings, lock_timeout=HOOK_LOCK_TIMEOUT)).summary()
    if settings.manifest_path.is_file() and not settings.is_reader:
        # The schema index too, built when missing or stale (else `check` fails until a
        # manual sync); a no-op when fresh.
        schema = sync_schema(settings)
        summary += "; schema " + ("up to date" if schema.noop else
                                  f"synced ({schema.embedded} embedded)")
    knowledge = load_knowledge(settings)
    if knowledge.files or read_knowledge_state(settings):
        # Rules and glossary: in step too (a checkout that removed them empties the table).
        report = sync_knowledge(settings, knowledge=knowledge)
        summary += "; knowledge " + ("up to date" if report.noop else
                                     f"synced ({report.embedded} embedded)")
    return summary


def _log(path: Path, message: str) -> None:
    try:
        statedir.ensure_parent(path)
        if path.exists() and path.stat().st_size > LOG_MAX_BYTES:
            os.replace(path, path.with_name(LOG_NAME + ".1"))
        stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        with path.open("a", encoding="utf-8") as fh:
            fh.write(f"{stamp} {message}\n")
    except OSError as e:  # a read-only checkout: nowhere to log, still never fail
        log.debug("cannot write %s: %s", path, e)
