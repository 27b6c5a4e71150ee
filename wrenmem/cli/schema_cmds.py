"""Schema memory commands: describe, fetch, seed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from wrenmem.api import Memory
from wrenmem.cli.common import emit_json, get_memory, json_option, output_option, warn
from wrenmem.cli.progress import Progress
from wrenmem.schema.describe import describe as describe_text
from wrenmem.settings import BACKENDS
from wrenmem.watch.process import start_on_demand

manifest_option = click.option(
    "--manifest", "--mdl", "-m", "manifest", type=click.Path(dir_okay=False),
    help="Manifest JSON to read (default: setting `manifest`, target/mdl.json); --mdl as in "
         "Wren.")


def _memory(ctx: click.Context, manifest: str | None, **overrides: object) -> Memory:
    # A path typed on the command line is relative to the shell's folder, not the project.
    path = str(Path(manifest).resolve()) if manifest else None
    # (Memory asks the daemon only for the project's own manifest, not one given here.)
    return get_memory(ctx, manifest=path, **overrides)


def _warn_manifest(warnings: tuple[str, ...], path: str) -> None:
    for message in warnings:
        warn(f"warning: {path}: {message}")


@click.command()
@manifest_option
@json_option
@click.pass_context
def describe(ctx: click.Context, manifest: str | None, as_json: bool) -> None:
    """Print the whole schema (models, columns, relationships, views, cubes) as plain text."""

    memory = _memory(ctx, manifest)
    settings = memory.settings
    loaded = memory.manifest()
    _warn_manifest(loaded.warnings, settings.relpath(settings.manifest_path))
    text = describe_text(loaded)
    if as_json:
        emit_json({"manifest": str(settings.manifest_path), "fingerprint": loaded.fingerprint,
                   "source": loaded.source, "dialect": loaded.dialect, "characters": len(text),
                   "counts": {"models": len(loaded.models),
                              "relationships": len(loaded.relationships),
                              "views": len(loaded.views), "cubes": len(loaded.cubes)},
                   "warnings": list(loaded.warnings), "text": text})
        return
    click.echo(text, nl=False)


@click.command()
@click.option("--query", "-q", "question", required=True, help="The question to answer.")
@click.option("--type", "-t", "types", multiple=True,
              help="Only items of this type (repeatable or comma list): model, column, "
                   "relationship, view, cube, measure, dimension, time_dimension.")
@click.option("--model", help="Only items of this model (or view, or cube's base model).")
@click.option("-k", "-l", "--limit", "k", default=10, show_default=True,
              type=click.IntRange(1, 1000), help="How many items in search mode.")
@click.option("--threshold", type=click.IntRange(0, None),
              help="Largest schema text returned whole (default: setting `fetch_threshold`, "
                   "30000 characters); 0 always searches.")
@click.option("--backend", "-b", type=click.Choice(BACKENDS),
              help="Search with grep (keywords), vector, hybrid or auto.")
@manifest_option
@json_option
@output_option
@click.pass_context
def fetch(ctx: click.Context, question: str, types: tuple[str, ...], model: str | None, k: int,
          threshold: int | None, backend: str | None, manifest: str | None,
          as_json: bool, output: str | None) -> None:
    """Schema context for a question: the whole schema when it is small, else the best items.

    Search mode brings the schema index up to date first (only changed items are embedded)
    and falls back to keyword search when the index extra is not installed.
    """

    memory = _memory(ctx, manifest, backend=backend)
    settings = memory.settings
    with Progress("fetch") as shown:  # (search mode embeds the schema items that changed)
        result: Any = memory.fetch(question, types=types, model=model, k=k,
                                   threshold=threshold,
                                   progress=shown.counter("schema items embedded"))
    if memory.use_daemon and result.strategy == "search":
        # as recall does: a watcher started in the background answers the next one warm
        start_on_demand(settings)
    _warn_manifest(result.warnings, settings.relpath(settings.manifest_path))
    for note in result.notes:
        warn(f"note: {note}")
    if as_json or output == "json":
        emit_json(result.to_dict())
        return
    click.echo(result.render(), nl=False)


@click.command()
@click.option("--write", is_flag=True,
              help="Write the seeds as pair files (source: seed) under knowledge/sql/seeds/.")
@manifest_option
@json_option
@click.pass_context
def seed(ctx: click.Context, write: bool, manifest: str | None, as_json: bool) -> None:
    """List the seed queries derived from the manifest (or write them as pair files).

    Seeds are recalled like pairs without being files. After --write they are ordinary pair
    files; a question that already has a file of another source is left alone.
    """

    memory = _memory(ctx, manifest)
    settings = memory.settings
    loaded = memory.manifest()
    _warn_manifest(loaded.warnings, settings.relpath(settings.manifest_path))
    from wrenmem.pairs.seeds import build_records  # (a fetch does not load the pairs)

    records = build_records(loaded)
    if not write:
        if as_json:
            keys = ("path", "nl", "sql", "dialect", "datasource", "tags")
            emit_json([{**{k: r[k] for k in keys}, "source": "seed", "model": r["model"]}
                       for r in records])
            return
        for n, r in enumerate(records):
            if n:
                click.echo()
            click.echo(f"{r['path']}  {r['nl']}")
            click.echo(f"    {r['sql']}")
        return

    notes: list[str] = []
    memory.notify = notes.append
    done = memory.write_seeds()
    written, skipped = done.written, done.skipped
    if as_json:
        emit_json({"written": written, "skipped": skipped})
        return
    created = sum(1 for w in written if w["created"])
    updated = sum(1 for w in written if w["changed"] and not w["created"])
    click.echo(f"wrote {created} new and updated {updated} seed pair files, "
               f"{len(written) - created - updated} unchanged; skipped {len(skipped)}")
    for s in skipped:
        warn(f"skipped {s['nl']!r}: {s['reason']} ({s['path']})")
    if notes:
        warn("; ".join(notes))


COMMANDS = [describe, fetch, seed]
