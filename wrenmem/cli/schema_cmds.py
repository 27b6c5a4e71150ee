"""Schema memory commands: describe, fetch, seed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from wrenmem.cli.common import emit_json, get_settings, json_option, output_option, warn
from wrenmem.index.autosync import after_write
from wrenmem.pairs.catalog import scan
from wrenmem.pairs.pairfile import Pair
from wrenmem.pairs.seeds import build_records
from wrenmem.pairs.store import store_pair
from wrenmem.schema.describe import describe as describe_text
from wrenmem.schema.fetch import fetch as fetch_context
from wrenmem.schema.manifest import load_manifest
from wrenmem.settings import BACKENDS, Settings
from wrenmem.watch.client import remote_fetch

manifest_option = click.option(
    "--manifest", "--mdl", "-m", "manifest", type=click.Path(dir_okay=False),
    help="Manifest JSON to read (default: setting `manifest`, target/mdl.json); --mdl as in "
         "Wren.")


def _settings(ctx: click.Context, manifest: str | None, **overrides: object) -> Settings:
    # A path typed on the command line is relative to the shell's folder, not the project.
    path = str(Path(manifest).resolve()) if manifest else None
    return get_settings(ctx, manifest=path, **overrides)


def _warn_manifest(warnings: tuple[str, ...], path: str) -> None:
    for message in warnings:
        warn(f"warning: {path}: {message}")


def _progress() -> Callable[[int, int], None] | None:
    """A one-line counter on a terminal's stderr while schema items are embedded."""
    import sys

    if not sys.stderr.isatty():
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done >= total else ""
        click.echo(f"\rembedding schema items: {done}/{total}", err=True, nl=False)
        if end:
            click.echo(err=True)

    return show


@click.command()
@manifest_option
@json_option
@click.pass_context
def describe(ctx: click.Context, manifest: str | None, as_json: bool) -> None:
    """Print the whole schema (models, columns, relationships, views, cubes) as plain text."""

    settings = _settings(ctx, manifest)
    loaded = load_manifest(settings.manifest_path)
    _warn_manifest(loaded.warnings, settings.relpath(settings.manifest_path))
    text = describe_text(loaded)
    if as_json:
        emit_json({"manifest": str(settings.manifest_path), "fingerprint": loaded.fingerprint,
                   "dialect": loaded.dialect, "characters": len(text),
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

    settings = _settings(ctx, manifest, backend=backend)
    # The running watcher answers warm when it can; otherwise the same work in-process.
    # Not for another manifest than the project's: the daemon answers for its own.
    result: Any = None if manifest else remote_fetch(settings, question, types=types,
                                                     model=model, k=k, threshold=threshold)
    if result is None:

        result = fetch_context(settings, question, types=types, model=model, k=k,
                               threshold=threshold, progress=_progress())
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

    settings = _settings(ctx, manifest)
    loaded = load_manifest(settings.manifest_path)
    _warn_manifest(loaded.warnings, settings.relpath(settings.manifest_path))
    records = build_records(loaded)
    if not write:
        if as_json:
            emit_json([{"path": r["path"], "nl": r["nl"], "sql": r["sql"],
                        "dialect": r["dialect"], "datasource": r["datasource"],
                        "tags": r["tags"], "source": "seed", "model": r["model"]}
                       for r in records])
            return
        for n, r in enumerate(records):
            if n:
                click.echo()
            click.echo(f"{r['path']}  {r['nl']}")
            click.echo(f"    {r['sql']}")
        return

    existing = {p.nl: p for p in scan(settings).pairs}
    written, skipped = [], []
    for r in records:
        other = existing.get(r["nl"])
        if other is not None and other.source != "seed":
            skipped.append({"nl": r["nl"], "path": other.path,
                            "reason": f"a {other.source} pair already answers it"})
            continue
        result = store_pair(settings, Pair(nl=r["nl"], sql=r["sql"], dialect=r["dialect"],
                                           datasource=r["datasource"], tags=tuple(r["tags"]),
                                           source="seed"), folder="seeds")
        written.append({"nl": r["nl"], "path": result.path, "created": result.created})
    note = after_write(settings, [w["path"] for w in written])
    if as_json:
        emit_json({"written": written, "skipped": skipped})
        return
    created = sum(1 for w in written if w["created"])
    click.echo(f"wrote {created} new and updated {len(written) - created} seed pair files; "
               f"skipped {len(skipped)}")
    for s in skipped:
        warn(f"skipped {s['nl']!r}: {s['reason']} ({s['path']})")
    if note:
        warn(note)


COMMANDS = [describe, fetch, seed]
