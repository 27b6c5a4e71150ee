"""import / export in Wren's queries.yml format."""

from __future__ import annotations

import sys

import click

from wrenmem.cli.common import alias, emit_json, get_memory, json_option, warn
from wrenmem.cli.progress import Progress


@click.command(name="import")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--upsert", is_flag=True, help="Update files whose question already exists.")
@click.option("--overwrite", is_flag=True,
              help="First delete every pair file whose source appears in FILE.")
@click.option("--dry-run", is_flag=True, help="Say what would happen; write nothing.")
@click.option("--force", is_flag=True, help="Import pairs whose SQL does not parse, too.")
@click.option("--yes", "-y", is_flag=True,
              help="With --overwrite: delete files without asking.")
@json_option
@click.pass_context
def import_cmd(ctx: click.Context, file: str, upsert: bool, overwrite: bool, dry_run: bool,
               force: bool, yes: bool, as_json: bool) -> None:
    """Import a queries.yml: each pair becomes a Markdown file (existing questions are
    skipped unless --upsert or --overwrite).

    The SQL of every pair must parse in its dialect, as for `store`: otherwise nothing is
    imported, unless --force. --overwrite deletes files: it lists them and asks first
    (--yes does not ask; without a terminal to ask on, --yes is needed).
    """

    if upsert and overwrite:
        raise click.UsageError("--upsert and --overwrite cannot be combined")
    mode = "upsert" if upsert else "overwrite" if overwrite else "skip"
    notes: list[str] = []
    memory = get_memory(ctx)
    memory.notify = notes.append
    if overwrite and not dry_run and not yes:
        doomed = memory.import_(file, mode=mode, dry_run=True, force=force).deleted
        if doomed:
            for rel in doomed:
                warn(f"would delete: {rel}")
            if not sys.stdin.isatty():
                raise click.UsageError(f"--overwrite deletes {len(doomed)} file(s): pass "
                                       "--yes to confirm (or --dry-run to look first)")
            click.confirm(f"Delete {len(doomed)} pair file(s) and import?", abort=True,
                          err=True)
    with Progress("import"):
        report = memory.import_(file, mode=mode, dry_run=dry_run, force=force)
    note = "; ".join(notes) or None
    if as_json:
        emit_json({**report.to_dict(), "dry_run": dry_run, "index": note})
        return
    verb = "would " if dry_run else ""
    renewed = set(report.created) & set(report.deleted)  # --overwrite: written anew in place
    for label, items in (("create", report.created), ("update", report.updated),
                         ("delete", report.deleted)):
        for item in items:
            if item in renewed:
                if label == "create":
                    click.echo(f"{verb}replace: {item}")
                continue
            click.echo(f"{verb}{label}: {item}")
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
