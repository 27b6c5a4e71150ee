"""``.wrenmem/``: the one place that names every derived file wrenmem keeps in a project.

Everything here can be deleted at any time; wrenmem rebuilds it from the pair files and
the manifest. Modules ask for ``settings.state_dir / NAME`` with a name from this list.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from wrenmem.errors import SettingsError

STATE_DIR = ".wrenmem"
CONFIG_FILE = "wrenmem.toml"  # the project's settings (wrenmem.settings reads it)
GITIGNORE = ".gitignore"  # `*`: the folder ignores itself, whether or not `init` ever ran

INDEX = "index"  # the LanceDB database (default of the `index` setting)
INDEX_LOCK = "index.lock"  # flock held by every writer of the index
INDEX_STATE = "index-state.bin"  # mirror of what the pairs table holds (no-op sync check)
INDEX_MAINT = "index-maint.bin"  # commits since the last compaction
CATALOG = "catalog.bin"  # parsed pair files by stat key
GREP_TERMS = "grep-terms.bin"  # BM25F term vectors by content hash
VOCABULARY = "vocabulary.bin"  # every pair's search terms, keyed by the pair files' hashes
GREP_SNAPSHOT = "grep-snapshot.bin"  # a one-shot grep's whole BM25F index, keyed by stats
QUESTIONS = "questions.bin"  # each pair file's question codes by stat key (store's lookup)
SEEDS = "seeds.json"  # seed pairs of the manifest by stat key and fingerprint
SCHEMA_CACHE = "schema_cache.bin"  # schema items and their keyword index
SCHEMA_STATE = "schema_index.json"  # what the schema table holds
SCHEMA_MAINT = "schema-maint.bin"  # commits to the schema table since its last compaction
DAEMON_SOCKET = "daemon.sock"  # the watcher's warm daemon (mode 0600)
DAEMON_HUNG = "daemon-hung"  # the daemon socket that did not answer a command (skipped a while)
WATCH_LOCK = "watch.lock"  # held by the running watcher for its whole life
WATCH_PID = "watch.pid"
WATCH_STATE = "watch.json"
WATCH_LOG = "watch.log"
HOOKS_LOG = "hooks.log"  # what the git hooks did
REPLICA = "replica"  # local read copy of a remote (object-storage) index
REPLICA_STATE = "replica.json"  # which remote version each table of the copy holds
REPLICA_MAINT = "replica-maint.bin"  # commits to the copy since its last compaction
HOOKS_DEFERRED = "hooks-deferred.lock"  # held by the one sync waiting for a rebase to end
EMBED_CACHE = "embed-cache.bin"  # vectors by (model id, content hash), kept across deletions
EMBED_CACHE_KEYS = "embed-cache-keys.bin"  # which texts the embedding cache holds (its stat)
SECOND_CACHE = "second-reader-cache.bin"  # the second reader's vectors of stored questions
RECALL_FIT = "recall-fit.json"  # the ranking fitted to the project's own pairs (recall.adapt)
RECALL_FIT_KEYS = "recall-fit-keys.bin"  # what the fit read of each pair file, by raw hash
RECALL_FIT_OWED = "recall-fit-owed.json"  # a fit a sync left to a detached fitter (fitjob)
RECALL_FIT_LOCK = "recall-fit.lock"  # flock held by whoever makes the recall fit
USES = "uses.bin"  # tables and columns each pair's SQL uses, by SQL, dialect and manifest
KNOWLEDGE_STATE = "knowledge_index.json"  # what the knowledge table holds
TMP = "tmp"  # temporary files of pair writes, renamed into knowledge/sql (git ignores them here)
IMPORT_SWAP = "import-swap.json"  # an import's staged files, until all are moved into place
IMPORT_SWAP_LOCK = "import-swap.lock"  # held while they are moved
VERIFICATIONS = "verifications.json"  # stamps `wrenmem verify` made here or found committed

# Written by earlier versions, removed by the next write of the pairs table or a reset: the
# saved recall copy (and its data files, ``recall-copy.<token>.data``), the lock of its
# saver, the pairs journal of small syncs and the schema search copy (issue 42: the warm
# daemon answers instead), and the saved pair-folder listing of the stat walk (it saved 1.05x
# of a no-op sync: bench/studies/slim-2026-12.md).
OLD = ("recall-copy.bin", "recall-copy.lock", "pairs-journal.bin", "schema-copy.bin",
       "pair-listing.bin")
OLD_PREFIX = "recall-copy."


def find_project_root(start: Path | None = None) -> Path:
    """Walk up from ``start`` to the folder holding ``wrenmem.toml``, ``knowledge/`` or ``.git``."""
    env = os.environ.get("WRENMEM_PROJECT")
    if env:
        return Path(env).resolve()
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / CONFIG_FILE).is_file() or (folder / "knowledge").is_dir():
            return folder
        if (folder / ".git").exists():
            return folder
    return here


def remove_old_files(folder: Path) -> None:
    """Remove what earlier versions kept in ``folder`` (a ``.wrenmem/``) and no longer use
    (:data:`OLD`); quietly, whatever is missing or cannot be removed."""
    try:
        names = [n for n in os.listdir(folder) if n in OLD or n.startswith(OLD_PREFIX)]
    except OSError:
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(folder / name)


def check_state_dir(root: Path) -> Path:
    """``root/.wrenmem``, refused unless it is absent or a real folder: a committed
    symbolic link would have every command write (and ``reset`` delete) where it points."""
    folder = root / STATE_DIR
    try:
        st = os.lstat(folder)
    except OSError:  # absent (created as a real folder when needed) or unreadable
        return folder
    if stat.S_ISLNK(st.st_mode):
        try:
            target = os.readlink(folder)
        except OSError:
            target = "?"
        raise SettingsError(
            f"{folder} is a symbolic link (to {target}): wrenmem keeps its derived state only "
            f"in a real folder inside the project and never writes or deletes through a link; "
            f"remove the link (rm {folder}) and run the command again (to keep the index "
            "elsewhere, set index_uri on the command line or as WRENMEM_INDEX_URI)")
    if not stat.S_ISDIR(st.st_mode):
        raise SettingsError(f"{folder} is not a folder: wrenmem keeps its derived state there; "
                            "move the file away and run the command again")
    return folder


def ensure_state_dir(folder: Path, mode: int = 0o777) -> Path:
    """Create ``folder`` (a ``.wrenmem/``) if needed, with a ``.gitignore`` holding ``*``
    (so the index is never committed, ``wrenmem init`` or not); an existing one is kept."""
    if folder.name == STATE_DIR:
        check_state_dir(folder.parent)
    if not folder.is_dir():  # (every warm recall takes the index lock: no failed mkdir)
        folder.mkdir(mode=mode, parents=True, exist_ok=True)
    ignore = folder / GITIGNORE
    if not ignore.exists():
        try:  # exclusive create: two processes starting at once write it once
            fd = os.open(ignore, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:  # written meanwhile, or a read-only checkout (nothing to protect)
            return folder
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("# written by wrenmem: everything here is derived state, never committed\n*\n")
    return folder


def ensure_parent(path: Path) -> None:
    """Create the folder of ``path``; if it lies in a ``.wrenmem/``, that folder ignores itself."""
    parent = path.parent
    parts = parent.parts
    if STATE_DIR in parts:
        top = Path(*parts[: len(parts) - parts[::-1].index(STATE_DIR)])
        ensure_state_dir(top)
    parent.mkdir(parents=True, exist_ok=True)
