"""``wrenmem sync`` when nothing changed, answered before click and the sync's code load.

A plain ``wrenmem sync`` (or ``index``, with ``--json`` and ``--pairs-only`` only) is
checked against the saved state: the pairs mirror (one stat walk, :func:`stat_delta`),
the schema index's state file (the manifest's stat) and the knowledge index's (the
entries' fingerprint). When all three vouch that there is nothing to do, the report
:func:`wrenmem.index.report.render_sync` prints is the one click's command would print,
and this process never imports click, the command tree, the sync (:mod:`wrenmem.index.sync`
and its writers) nor LanceDB. Anything else declines (None) and click runs the command:
another option, a reader, a grep-only project, a running watcher (it syncs), a fit owed,
a file that may have changed, a mirror that cannot vouch.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

from wrenmem.errors import log_to_stderr
from wrenmem.fs import daemonsock
from wrenmem.index.fitjob import owed_path
from wrenmem.index.report import SyncReport, render_sync
from wrenmem.index.state import record_walk, report_from_state, stat_delta
from wrenmem.lazy import lazies
from wrenmem.settings import Settings, find_project_root, load_settings

if TYPE_CHECKING:
    from wrenmem.embed import embedders
    from wrenmem.knowledge import table as knowledge_table
    from wrenmem.knowledge.table import KnowledgeSyncReport
    from wrenmem.schema import table as schema_table
    from wrenmem.schema.table import SchemaSyncReport
    from wrenmem.storage import lance
else:  # each asked only once the one before it vouched
    embedders, knowledge_table, schema_table, lance = lazies(
        "wrenmem", "embed.embedders knowledge.table schema.table storage.lance")

COMMANDS = ("sync", "index")
FLAGS = ("--json", "--pairs-only")


def noop_sync(argv: Sequence[str], *, stdout: IO[str] | None = None,
              stderr: IO[str] | None = None) -> int | None:
    """Answer ``wrenmem ARGV`` when it is a sync with nothing to do: 0, its output written;
    else None (click runs it)."""
    if not argv or argv[0] not in COMMANDS or not set(argv[1:]) <= set(FLAGS):
        return None
    try:
        settings = load_settings(find_project_root(), {})
        answer = _noop_answer(settings, pairs_only="--pairs-only" in argv)
    except Exception:  # whatever it is, click's sync meets it again and says it properly
        return None
    if answer is None:
        return None
    report, schema, knowledge = answer
    out, err = render_sync(report, schema, knowledge, as_json="--json" in argv)
    for line in err:
        (stderr or sys.stderr).write(line + "\n")
    (stdout or sys.stdout).write(out)
    return 0


def _noop_answer(settings: Settings, *, pairs_only: bool
                 ) -> tuple[SyncReport, SchemaSyncReport | None,
                            KnowledgeSyncReport | None] | None:
    """The three reports of a sync with nothing to do, or None: it has something to do,
    or this check cannot tell."""
    root = settings.root
    if (settings.is_reader or settings.backend == "grep" or owed_path(settings.state_dir).exists()
            or (daemonsock.worth_asking(root) and os.path.exists(daemonsock.socket_path(root)))
            or lance.index_unavailable(settings) is not None):
        return None
    log_to_stderr()
    model_id = embedders.get_embedder(settings.embedder, root=root).model_id  # not loaded
    delta = stat_delta(settings, model_id)
    if delta is None or not delta.empty or delta.partial:
        return None
    schema = knowledge = None
    if not pairs_only:
        if settings.manifest_path.is_file():
            schema = schema_table.noop_report(settings, model_id)
            if schema is None:
                return None  # a build to show progress for: click does it
        knowledge = knowledge_table.noop_report(settings, model_id)
        if knowledge is None:
            return None
    if not delta.quick and delta.walk is not None:  # the next no-op compares bytes
        record_walk(settings, delta.state, delta.walk)
    return report_from_state(delta.state, model_id), schema, knowledge
