"""watch: keep the index in step with the files, and answer the CLI warm."""

from __future__ import annotations

import datetime as dt
import functools
import logging
import sys
import threading
from typing import TextIO

import click

from wrenmem.cli.common import emit_json, get_settings, json_option, warn
from wrenmem.cli.forwarded import run_forwarded
from wrenmem.watch import process
from wrenmem.watch import run as watch_run
from wrenmem.watch.loop import LoopConfig


@click.command()
@click.option("--detach", is_flag=True, help="Run in the background (log: .wrenmem/watch.log).")
@click.option("--stop", is_flag=True, help="Stop the background watcher of this project.")
@click.option("--status", "show_status", is_flag=True,
              help="Whether a watcher runs, its pid, socket and last sync.")
@click.option("--poll", is_flag=True,
              help="Poll the files instead of using inotify (network or container mounts).")
@click.option("--no-daemon", is_flag=True, help="Do not answer recall/fetch/status requests.")
@click.option("--debounce", type=click.FloatRange(0.0, 60.0), default=0.15, show_default=True,
              help="Seconds of quiet that end a burst of changes.")
@click.option("--interval", "-i", type=click.FloatRange(0.1, None),
              help="Poll the files every S seconds (implies --poll); as Wren's.")
@click.option("--max-polls", type=click.IntRange(1, None),
              help="Stop after this many poll intervals (5 s each unless --interval); "
                   "as Wren's.")
@click.option("--idle-exit", type=click.FloatRange(1.0, None), hidden=True,
              help="Stop after S seconds without a request (a watcher a recall started).")
@click.option("--reindex-on-start/--no-reindex-on-start", default=False, hidden=True,
              help="Accepted for Wren's scripts: wrenmem always syncs when it starts.")
@click.option("--mdl", "wren_mdl", hidden=True, type=click.Path(dir_okay=False),
              help="Wren's: the manifest to watch (setting `manifest` for this run).")
@click.option("--path", "-p", "wren_path", hidden=True,
              help="Wren's LanceDB folder: not used (wrenmem's index is the setting `index`).")
@json_option
@click.pass_context
def watch(ctx: click.Context, detach: bool, stop: bool, show_status: bool, poll: bool,
          no_daemon: bool, debounce: float, interval: float | None, max_polls: int | None,
          idle_exit: float | None, reindex_on_start: bool, wren_mdl: str | None,
          wren_path: str | None, as_json: bool) -> None:
    """Watch knowledge/sql/ and the manifest; sync the index after every change.

    While it runs it also answers `recall`, `fetch` and `status` with the model already
    loaded, over a socket in .wrenmem/ that only you can use; the CLI uses it when it is
    there and gives the same answers without it. Stop it with Ctrl-C or SIGTERM.
    """
    if sum((detach, stop, show_status)) > 1:
        raise click.UsageError("--detach, --stop and --status are exclusive")
    from pathlib import Path

    from wrenmem.cli.index_cmds import wren_path_note

    wren_path_note(wren_path)
    overrides = {"manifest": str(Path(wren_mdl).resolve())} if wren_mdl else {}
    settings = get_settings(ctx, **overrides)
    if show_status:
        info = process.watcher_status(settings)
        if as_json:
            emit_json(info)
        else:
            _print_status(info)
        ctx.exit(0 if info["running"] else 1)
    if stop:
        pid = process.stop_watcher(settings)
        if as_json:
            emit_json({"stopped": pid is not None, "pid": pid})
        elif pid is None:
            warn("no watcher is running for this project")
        else:
            click.echo(f"stopped the watcher (pid {pid})")
        return
    poll = poll or interval is not None
    argv = [*(["--poll"] if poll else []), *(["--no-daemon"] if no_daemon else []),
            "--debounce", str(debounce), *(["--interval", str(interval)] if interval else []),
            *(["--max-polls", str(max_polls)] if max_polls else []),
            *(["--idle-exit", str(idle_exit)] if idle_exit else []),
            *(["--mdl", overrides["manifest"]] if overrides else [])]
    if detach:
        pid = process.start_detached(settings, argv)
        if as_json:
            emit_json({"started": True, "pid": pid,
                       "log": str(settings.state_dir / process.LOG_FILE)})
        else:
            click.echo(f"watching in the background (pid {pid}); log: "
                       f"{settings.relpath(settings.state_dir / process.LOG_FILE)}")
        return

    _log_to_stderr()
    stopping = threading.Event()
    if max_polls is not None:  # Wren's bounded run: as many intervals, then stop
        timer = threading.Timer(max_polls * (interval or 5.0), stopping.set)
        timer.daemon = True
        timer.start()
    watch_run.run_watch(settings, reload=lambda: get_settings(ctx, **overrides),
                        options=watch_run.WatchOptions(poll=poll, daemon=not no_daemon,
                                                       config=LoopConfig(debounce=debounce),
                                                       poll_interval=interval or 0.5,
                                                       idle_exit=idle_exit,
                                                       run_cli=run_forwarded),
                        stop=stopping, report=functools.partial(_report, sys.stderr))
    warn("watch: stopped")


def _log_to_stderr() -> None:
    # Library messages (logging) and ours go to stderr with a timestamp; a detached watcher's
    # stderr is its log file.
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%Y-%m-%dT%H:%M:%S"))
    logger = logging.getLogger("wrenmem")
    logger.handlers[:] = [handler]
    logger.propagate = False


def _report(stream: TextIO, level: str, message: str) -> None:
    # (to the stderr the watcher started with: the daemon holds sys.stderr a moment while it
    # runs a client's command line, wrenmem/cli/forwarded.py)
    stamp = dt.datetime.now().strftime("%Y-%m-%dT%H:%M:%S")
    prefix = {"ERROR": "error: ", "WARNING": "warning: "}.get(level, "")
    click.echo(f"{stamp} {prefix}{message}", file=stream)


def _print_status(info: dict[str, object]) -> None:
    if not info["running"]:
        click.echo("watcher: not running"
                   + (" (removed the files of a watcher that died)"
                      if info.get("stale_cleaned") else ""))
        return
    click.echo(f"watcher: running (pid {info['pid']}, {info.get('mode') or '?'})")
    click.echo(f"daemon:  {info['socket'] if info['daemon'] else 'not answering'}")
    last = info.get("last_sync_at")
    when = (dt.datetime.fromtimestamp(float(last)).strftime("%Y-%m-%d %H:%M:%S")  # type: ignore[arg-type]
            if last else "never")
    click.echo(f"syncs:   {info.get('syncs', 0)}, last at {when}"
               + (f": {info['last_summary']}" if info.get("last_summary") else ""))
    if info.get("last_error"):
        click.echo(f"error:   {info['last_error']}")
    for path in info.get("bad_files") or ():  # type: ignore[attr-defined]
        click.echo(f"bad file: {path}")


COMMANDS = [watch]
