"""``wrenmem`` and ``python -m wrenmem``: a fast path for an agent's calls, then the click CLI.

``recall`` and ``fetch`` with simple arguments are sent straight to a running watcher's
socket, and without a daemon ``recall`` is answered in this process (``Memory.recall_many``,
as click's command does), and so is ``fetch`` while the schema index is up to date
(``Memory.fetch``), all without importing click or the command tree (about 60-100 ms of
start-up saved per call). ``sync`` (``--json``, ``--pairs-only``) without a watcher is
answered here when nothing changed (:func:`wrenmem.index.noop.noop_report`). Where the
files are many, the stat walk that ``sync`` and ``recall`` need runs in a forked child
from the start (:func:`wrenmem.pairs.listing.start_early`), and so it does for ``store``
before click is imported (:func:`_walk_early_for_store`: its duplicate lookup walks every
file before it writes one). Anything else, or
any failure at all (other settings, an option this parser does not know, an error), goes
to the click CLI, which prints exactly the same thing. The parser below accepts only what
it fully understands; it never guesses. ``WRENMEM_NO_FAST_PATH=1`` sends every call to click.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from wrenmem.errors import log_to_stderr
from wrenmem.settings import find_project_root, load_settings

# The rest is imported by the command that needs it, after the early walk is forked.

# Options this fast path understands: name -> (destination, takes a value, repeatable).
_COMMON = {"-k": "k", "-l": "k", "--limit": "k", "-b": "backend", "--backend": "backend",
           "--json": "json", "-o": "output", "--output": "output", "-q": "queries",
           "--query": "queries"}
_OPTIONS = {
    "recall": {**_COMMON, "-d": "datasource", "--datasource": "datasource", "--tag": "tags",
               "--source": "source", "--min-score": "min_score", "--sql": "sql",
               "--verified": "verified"},
    "fetch": {**_COMMON, "-t": "types", "--type": "types", "--model": "model",
              "--threshold": "threshold"},
    "sync": {"--json": "json", "--pairs-only": "pairs_only"},
    "index": {"--json": "json", "--pairs-only": "pairs_only"},  # the alias of sync
}
_REPEATABLE = {"queries", "tags", "types"}
_FLAGS = {"json", "verified", "pairs_only"}
_DEFAULT_K = {"recall": 3, "fetch": 10}
_BACKENDS = ("auto", "grep", "vector", "hybrid")
FAST_PATH_OFF_ENV = "WRENMEM_NO_FAST_PATH"


class _Unhandled(Exception):
    """Not for the fast path: let click do it."""


def parse(argv: list[str]) -> tuple[str | None, str, dict[str, Any]]:
    """(project, command, options) of a simple ``recall``/``fetch`` call, else _Unhandled."""
    args = list(argv)
    project = None
    while args and args[0].startswith("-"):
        head = args.pop(0)
        if head in ("--project", "-P") and args:
            project = args.pop(0)
        elif head.startswith("--project="):
            project = head.split("=", 1)[1]
        else:
            raise _Unhandled(head)
    if not args or args[0] not in _OPTIONS:
        raise _Unhandled("command")
    command, rest = args[0], args[1:]
    known = _OPTIONS[command]
    options: dict[str, Any] = {name: [] for name in _REPEATABLE}
    while rest:
        token = rest.pop(0)
        value: str | None = None
        if token.startswith("--") and "=" in token:
            token, value = token.split("=", 1)
        dest = known.get(token)
        if dest is None:
            raise _Unhandled(token)  # --help, --format, --manifest, a typo, a positional…
        if dest in _FLAGS:
            if value is not None:
                raise _Unhandled(token)
            options[dest] = True
            continue
        if value is None:
            if not rest:
                raise _Unhandled(token)
            value = rest.pop(0)
        if dest in _REPEATABLE:
            options[dest].append(value)
        elif dest in options:
            raise _Unhandled(token)  # given twice: click's rules decide
        else:
            options[dest] = value
    return project, command, _checked(command, options)


def _checked(command: str, options: dict[str, Any]) -> dict[str, Any]:
    """Values as click would convert them, or _Unhandled when click would complain."""
    if command in ("sync", "index"):
        return {"json": bool(options.get("json")), "pairs_only": bool(options.get("pairs_only"))}
    try:
        k = int(options.get("k", _DEFAULT_K[command]))
        threshold = options.get("threshold")
        threshold = None if threshold is None else int(threshold)
        min_score = float(options.get("min_score", 0.0))
    except ValueError:
        raise _Unhandled("number") from None
    if (not 1 <= k <= 1000 or (threshold is not None and threshold < 0)
            or not 0.0 <= min_score <= 1.0):  # also NaN: click decides
        raise _Unhandled("range")
    if options.get("backend") not in (None, *_BACKENDS):
        raise _Unhandled("backend")
    if options.get("output") not in (None, "json", "table"):
        raise _Unhandled("output")
    if not options["queries"] or (command == "fetch" and len(options["queries"]) != 1):
        raise _Unhandled("queries")
    return {**options, "k": k, "threshold": threshold, "min_score": min_score,
            "json": bool(options.get("json")) or options.get("output") == "json"}


def try_fast(argv: list[str]) -> bool:
    """Answer ``argv`` through the daemon, or for ``recall`` in this process; True when
    done (output printed)."""
    if os.environ.get(FAST_PATH_OFF_ENV, "") not in ("", "0"):
        return False
    try:
        project, command, options = parse(argv)
        root = Path(project).resolve() if project else find_project_root()
        settings = load_settings(root, {"backend": options.get("backend")})
        answer = {"recall": _recall, "fetch": _fetch}.get(command, _sync)(settings, options)
    except Exception:  # whatever it is, the CLI does it again and reports it properly
        return False
    if answer is None:
        return False
    out, err = answer
    for line in err:
        sys.stderr.write(line + "\n")
    sys.stdout.write(out)
    sys.stdout.flush()
    return True


def _recall(settings: Any, options: dict[str, Any]) -> tuple[str, list[str]] | None:
    filtered = (options["tags"] or options.get("datasource") or options.get("source")
                or options.get("verified"))
    if not settings.is_reader and not (filtered and settings.backend == "grep"):
        _walk_early(settings)  # (a reader's catch-up walks nothing; grep with a filter reads)
    from wrenmem.api import Memory

    notes: list[str] = []
    log_to_stderr()
    memory = Memory.from_settings(settings, use_daemon=True, notify=notes.append)
    results = memory.recall_many(options["queries"], options["k"],
                                 datasource=options.get("datasource"),
                                 tags=tuple(options["tags"]), source=options.get("source"),
                                 min_score=options["min_score"], sql=options.get("sql"),
                                 verified=bool(options.get("verified")))
    if options["json"]:
        return _json([r.to_dict() for r in results]), notes
    from wrenmem.recall.render import render_text

    return render_text(results), notes


# .wrenmem/pair-listing.bin from this size, about 10,000 files (a walk of some 30 ms, the
# fork a few): a grep recall of 10,000 pairs, 6 runs each way alternating at load 2.6, took
# 0.26-0.44 s with the child and 0.32-0.41 s without (no difference beyond the noise)
EARLY_MIN_BYTES = 150_000


def _walk_early_for_store(argv: list[str]) -> bool:
    """Start the early walk (:func:`_walk_early`'s conditions but the watcher's socket) for
    a ``store`` call the click CLI runs: its duplicate lookup
    (:func:`wrenmem.pairs.questions.asking`) walks every pair file, before the command
    writes one, after imports of click, sqlglot and numpy that the child's walk overlaps.
    A watcher does not take that walk from the command, so its socket does not matter
    here. Not when an interrupted import has files to move into place first (the lookup
    moves them before it walks). True when a child was started."""
    args = list(argv)
    project = None
    if len(args) >= 2 and args[0] in ("--project", "-P"):
        project = args[1]
        args = args[2:]
    elif args and args[0].startswith("--project="):
        project = args.pop(0).split("=", 1)[1]
    if not args or args[0] != "store" or "--help" in args:
        return False
    try:
        root = Path(project).resolve() if project else find_project_root()
        settings = load_settings(root)
        if settings.is_reader:
            return False
        from wrenmem.pairs.swap import interrupted

        if interrupted(settings):
            return False
        return _walk_early(settings, watcher_matters=False)
    except Exception:  # whatever it is, the command walks in its own time and says why
        return False


def _walk_early(settings: Any, *, watcher_matters: bool = True) -> bool:
    """Start the stat walk of the pair files in a child (:func:`listing.start_early`), so
    it runs on the other core while this process imports and loads; only when no watcher
    may answer instead (its socket is there; ``watcher_matters``) and the files are many
    (the folder record's size says so: for a few thousand the fork costs as much as the
    walk), and the cores are not all taken (the load average below their count: else the
    child would only queue, at the cost of the fork). ``WRENMEM_EARLY_WALK``: 0 never, 1
    whatever the size and the load."""
    from wrenmem import statedir
    from wrenmem.pairs import listing
    from wrenmem.watch.client import socket_path

    forced = os.environ.get(listing.EARLY_ENV, "").strip() == "1"
    try:
        if watcher_matters and os.path.exists(socket_path(settings.root)):
            return False
        if not forced and (os.path.getsize(settings.state_dir / statedir.PAIR_LISTING)
                           < EARLY_MIN_BYTES or listing.cores_busy()):
            return False
    except OSError:
        return False
    return listing.start_early(settings)


def _sync(settings: Any, options: dict[str, Any]) -> tuple[str, list[str]] | None:
    """``wrenmem sync`` when nothing changed (pairs, schema and knowledge), without click
    or the sync's imports: the report the full path would print. None (click syncs) for
    anything else: a change, a watcher to hand the sync to, a reader, a grep-only project,
    a schema index that is not fresh. The stat walk the no-op check took is handed to
    click's sync."""
    from wrenmem.watch.client import socket_path

    if settings.is_reader or settings.backend == "grep" or os.path.exists(
            socket_path(settings.root)):
        return None
    _walk_early(settings)
    log_to_stderr()
    from wrenmem.lance import index_unavailable

    if index_unavailable(settings) is not None:
        return None
    from wrenmem.embedders import get_embedder
    from wrenmem.index.noop import noop_report
    from wrenmem.index.report import render_sync

    model_id = get_embedder(settings.embedder, root=settings.root).model_id  # not loaded
    report = noop_report(settings, model_id, keep_walk=True)
    if report is None:
        return None
    schema = knowledge = None
    if not options["pairs_only"]:
        if settings.manifest_path.is_file():
            from wrenmem.schema.table import is_fresh, sync_schema

            if not is_fresh(settings, settings.manifest_path.resolve(), model_id):
                return None  # a build to show progress for: click does it
            schema = sync_schema(settings)  # the fresh index's report (nothing written)
        from wrenmem.knowledge.table import knowledge_noop

        knowledge = knowledge_noop(settings, model_id)  # (the files read, and one state file)
        if knowledge is None:
            return None  # knowledge entries to embed: click does it
    return render_sync(report, schema, knowledge, as_json=options["json"])


def _fetch(settings: Any, options: dict[str, Any]) -> tuple[str, list[str]] | None:
    from wrenmem.watch.client import remote_fetch

    result: Any = remote_fetch(settings, options["queries"][0], types=tuple(options["types"]),
                               model=options.get("model"), k=options["k"],
                               threshold=options["threshold"])
    notes: list[str] = []
    if result is None:
        result = _fetch_here(settings, options, notes)
    if result is None:
        return None
    where = settings.relpath(settings.manifest_path)
    err = notes + ([f"warning: {where}: {w}" for w in result.warnings]
                   + [f"note: {n}" for n in result.notes])
    return (_json(result.to_dict()) if options["json"] else result.render()), err


def _fetch_here(settings: Any, options: dict[str, Any], notes: list[str]) -> Any:
    """``Memory.fetch`` in this process, as click's command calls it, while the schema index
    holds this manifest (nothing to build: no progress to show); else None (click)."""
    from wrenmem.api import Memory
    from wrenmem.embedders import get_embedder
    from wrenmem.schema.table import is_fresh

    embedder = get_embedder(settings.embedder, root=settings.root)  # loaded on first use
    if settings.backend != "grep" and not is_fresh(
            settings, settings.manifest_path.resolve(), embedder.model_id):
        return None
    _one_blas_thread()
    log_to_stderr()
    memory = Memory.from_settings(settings, embedder=embedder, use_daemon=False,
                                  notify=notes.append)
    return memory.fetch(options["queries"][0], types=tuple(options["types"]),
                        model=options.get("model"), k=options["k"],
                        threshold=options["threshold"])


def _one_blas_thread() -> None:
    """Start OpenBLAS with one thread in a process that embeds a question or two (nothing
    to sync): the embedder multiplies with one anyway (``embedders._few_texts``), and
    importing numpy with two cost a one-shot fetch 0.08 s of CPU and 0.12 s of wall time
    under load (0.61-0.69 s against 0.74-0.86 s, four runs each). Only before numpy is
    imported, and never against the user's own setting."""
    if "numpy" not in sys.modules:
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
        from wrenmem.embedders import blas_starts_single

        blas_starts_single()


def _json(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False, indent=2, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        if try_fast(args):
            return
    except BrokenPipeError:
        sys.exit(0)
    _walk_early_for_store(args)
    from wrenmem.cli import main as cli_main

    cli_main(args)


if __name__ == "__main__":
    main()
