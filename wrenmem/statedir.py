"""``.wrenmem/``: the one place that names every derived file wrenmem keeps in a project.

Everything here can be deleted at any time; wrenmem rebuilds it from the pair files and
the manifest. Modules ask for ``settings.state_dir / NAME`` with a name from this list.
"""

from __future__ import annotations

STATE_DIR = ".wrenmem"

INDEX = "index"  # the LanceDB database (default of the `index` setting)
INDEX_LOCK = "index.lock"  # flock held by every writer of the index
INDEX_STATE = "index-state.bin"  # mirror of what the pairs table holds (no-op sync check)
INDEX_MAINT = "index-maint.bin"  # commits since the last compaction
CATALOG = "catalog.bin"  # parsed pair files by stat key
GREP_TERMS = "grep-terms.bin"  # BM25F term vectors by content hash
SEEDS = "seeds.json"  # seed pairs of the manifest by stat key and fingerprint
SCHEMA_CACHE = "schema_cache.bin"  # schema items and their keyword index
SCHEMA_STATE = "schema_index.json"  # what the schema table holds
SCHEMA_MAINT = "schema-maint.bin"  # commits to the schema table since its last compaction
DAEMON_SOCKET = "daemon.sock"  # the watcher's warm daemon (mode 0600)
WATCH_LOCK = "watch.lock"  # held by the running watcher for its whole life
WATCH_PID = "watch.pid"
WATCH_STATE = "watch.json"
WATCH_LOG = "watch.log"
HOOKS_LOG = "hooks.log"  # what the git hooks did
REPLICA = "replica"  # local read copy of a remote (object-storage) index
REPLICA_STATE = "replica.json"  # which remote version each table of the copy holds
REPLICA_MAINT = "replica-maint.bin"  # commits to the copy since its last compaction

ALL = (INDEX, INDEX_LOCK, INDEX_STATE, INDEX_MAINT, CATALOG, GREP_TERMS, SEEDS, SCHEMA_CACHE,
       SCHEMA_STATE, SCHEMA_MAINT, DAEMON_SOCKET, WATCH_LOCK, WATCH_PID, WATCH_STATE,
       WATCH_LOG, HOOKS_LOG, REPLICA, REPLICA_STATE, REPLICA_MAINT)
