"""import / export in Wren's queries.yml format."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

import click

from wrenmem.cli.common import (
    alias,
    emit_json,
    get_memory,
    json_option,
    list_each,
    verbose_option,
    warn,
)
from wrenmem.cli.progress import Progress

if TYPE_CHECKING:
    from wrenmem.pairs.exchange import ImportReport
    from wrenmem.pairs.wren_store import WrenStore


@click.command(name="import")
@click.argument("file", required=False, type=click.Path(exists=True, dir_okay=False))
@click.option("--from-wren", "from_wren", type=click.Path(exists=True, file_okay=False),
              help="Read a Wren memory store instead (its LanceDB folder, e.g. .wren/memory): "
                   "Wren's `export` migration.")
@click.option("--include-seed", is_flag=True,
              help="With --from-wren: also the seed rows (left out: the manifest makes them).")
@click.option("--upsert", is_flag=True, help="Update files whose question already exists.")
@click.option("--overwrite", is_flag=True,
              help="First delete every pair file whose source appears in FILE.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; write nothing.")
@click.option("--force", is_flag=True, help="Import pairs whose SQL does not parse, too.")
@click.option("--yes", "-y", is_flag=True,
              help="With --overwrite: delete files without asking.")
@verbose_option
@json_option
@click.pass_context
def import_cmd(ctx: click.Context, file: str | None, from_wren: str | None,
               include_seed: bool, upsert: bool, overwrite: bool, dry_run: bool,
               force: bool, yes: bool, verbose: int, as_json: bool) -> None:
    """Import a queries.yml: each pair becomes a Markdown file (existing questions are
    skipped unless --upsert or --overwrite).

    The SQL of every pair must parse in its dialect, as for `store`: otherwise nothing is
    imported, unless --force. --overwrite deletes files: it lists them and asks first
    (--yes does not ask; without a terminal to ask on, --yes is needed).

    --from-wren PATH reads the pairs of a Wren memory store (table query_history) instead
    of a file: the newest row of each question, its source, tags, datasource and created_at.

    Each file written is named (`create: PATH`) when there are a few; past 20, only the
    counts, unless -v. A long import shows its progress on stderr.
    """

    if (file is None) == (from_wren is None):
        raise click.UsageError("give a queries.yml FILE or --from-wren PATH (one of them)")
    if upsert and overwrite:
        raise click.UsageError("--upsert and --overwrite cannot be combined")
    mode = "upsert" if upsert else "overwrite" if overwrite else "skip"
    notes: list[str] = []
    memory = get_memory(ctx)
    memory.notify = notes.append
    store: WrenStore | None = None

    def run(dry: bool, shown: Progress | None = None) -> ImportReport:
        nonlocal store
        steps: dict[str, Callable[[int, int], None]] = {} if shown is None else {
            "progress": shown.counter("pairs checked"),
            "written": shown.counter("files written")}
        if from_wren is None:
            return memory.import_(file or "", mode=mode, dry_run=dry, force=force, **steps)
        report, store = memory.import_wren(from_wren, mode=mode, dry_run=dry, force=force,
                                           include_seed=include_seed, **steps)
        return report

    if overwrite and not dry_run and not yes:
        doomed = run(True).deleted
        if doomed:
            for rel in doomed:
                warn(f"would delete: {rel}")
            if not sys.stdin.isatty():
                raise click.UsageError(f"--overwrite deletes {len(doomed)} file(s): pass "
                                       "--yes to confirm (or --dry-run to look first)")
            click.confirm(f"Delete {len(doomed)} pair file(s) and import?", abort=True,
                          err=True)
    with Progress("import") as shown:
        report = run(dry_run, shown)
    note = "; ".join(notes) or None
    wren = None if store is None else {
        "rows": store.rows, "seeds_left_out": store.seeds, "empty_rows": store.empty,
        "superseded": [{"question": q, "created_at": c} for q, c in store.superseded]}
    if as_json:
        emit_json({**report.to_dict(), "dry_run": dry_run, "index": note,
                   **({"wren": wren} if wren else {})})
        return
    if store is not None:
        for question, created in store.superseded:
            warn(f"superseded in the Wren store: an older SQL of {question!r} "
                 f"({created or 'no date'}); the newest row is imported")
        warn(f"{from_wren}: {store.rows} row(s) in query_history, {len(store.pairs)} pair(s)"
             + (f", {store.seeds} seed row(s) left out (--include-seed)" if store.seeds else "")
             + (f", {store.empty} row(s) without question or SQL" if store.empty else ""))
    verb = "would " if dry_run else ""
    renewed = set(report.created) & set(report.deleted)  # --overwrite: written anew in place
    lines = []
    for label, items in (("create", report.created), ("update", report.updated),
                         ("delete", report.deleted)):
        for item in items:
            if item in renewed:
                if label == "create":
                    lines.append(f"{verb}replace: {item}")
                continue
            lines.append(f"{verb}{label}: {item}")
    if list_each(ctx, verbose, len(lines)):
        for line in lines:
            click.echo(line)
    else:
        done = "to write or delete" if dry_run else "written or deleted"
        warn(f"{len(lines)} file(s) {done}, not named one by one (-v names them)")
    click.echo(f"{report.read} pair(s) read [{mode}]: {len(report.created)} new, "
               f"{len(report.updated)} updated, {len(report.unchanged)} unchanged, "
               f"{len(report.deleted)} deleted, {len(report.skipped)} skipped"
               + (" (dry run)" if dry_run else ""))
    if note:
        warn(note)


@click.command()
@click.argument("file", required=False, type=click.Path(dir_okay=False))
@click.option("--output", "-o", "output", type=click.Path(dir_okay=False),
              help="Write to this file (as FILE; Wren's spelling).")
@click.option("--source", "-s", help="Only pairs with this source.")
@click.option("--include-seed", is_flag=True, help="Also export seed queries from the manifest.")
@click.pass_context
def export(ctx: click.Context, file: str | None, output: str | None, source: str | None,
           include_seed: bool) -> None:
    """Export pairs as a queries.yml to FILE (or stdout)."""

    if file and output and file != output:
        raise click.UsageError("give the output file once: FILE or --output")
    file = file or output
    memory = get_memory(ctx)
    if file is None or file == "-":
        click.echo(memory.export(source=source, seeds=include_seed), nl=False)
    else:
        memory.export(file, source=source, seeds=include_seed)
        warn(f"exported {len(memory.list(source=source, seeds=include_seed))} pair(s) to {file}")


COMMANDS = [import_cmd, export, alias(import_cmd, "load"), alias(export, "dump")]
