"""Index commands: sync (alias index), status, check, reset."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from wrenmem.cli.common import alias, emit_json, get_memory, json_option, report_pair_errors, warn
from wrenmem.cli.progress import Progress
from wrenmem.index.report import render_sync

GREP_ONLY = "grep backend: the pair files are the index; nothing to build"


# Wren's `index` options, accepted by sync and index alike (docs/coming-from-wren.md).
wren_path_option = click.option(
    "--path", "-p", "wren_path", hidden=True,
    help="Wren's LanceDB folder: not used here (wrenmem's index is the setting `index`; "
         "`import --from-wren PATH` reads a Wren store).")


def wren_path_note(path: str | None) -> None:
    if path is not None:
        warn(f"--path {path}: Wren's LanceDB folder is not used by this command (wrenmem's "
             "index is the setting `index`); `wrenmem import --from-wren PATH` migrates a "
             "Wren store")


@click.command()
@click.option("--full", is_flag=True, help="Drop the pairs table and rebuild it from scratch.")
@click.option("--pairs-only", is_flag=True,
              help="Do not build or update the schema and knowledge indexes.")
@click.option("--mdl", "--manifest", "-m", "manifest", type=click.Path(dir_okay=False),
              help="Manifest JSON for this run (default: setting `manifest`); --mdl as in Wren.")
@click.option("--no-seed", "no_seed", is_flag=True,
              help="Leave the manifest's seed queries out (setting `seeds = false` for this run).")
@click.option("--no-queries", "no_queries", is_flag=True,
              help="Do not index the pair files; only the schema and knowledge (as Wren's).")
@click.option("--instructions/--no-instructions", default=True,
              help="Index the rules, glossary and caveats too (default); as Wren's.")
@wren_path_option
@json_option
@click.pass_context
def sync(ctx: click.Context, full: bool, pairs_only: bool, manifest: str | None,
         no_seed: bool, no_queries: bool, instructions: bool, wren_path: str | None,
         as_json: bool) -> None:
    """Bring the index up to date with the pair files (embeds only new and changed pairs),
    the schema index with the manifest, when there is one, and the knowledge index with
    the rules, glossary, caveats and metrics files (neither with --pairs-only).

    In a grep-only project (backend = "grep", or no index extra) there is nothing to build.
    """

    if pairs_only and no_queries:
        raise click.UsageError("--pairs-only and --no-queries leave nothing to index")
    wren_path_note(wren_path)
    memory = get_memory(ctx, manifest=str(Path(manifest).resolve()) if manifest else None,
                        seeds=False if no_seed else None)
    if memory.grep_only:
        if as_json:
            emit_json({"noop": True, "grep_only": True, "schema": None, "knowledge": None})
        else:
            click.echo(GREP_ONLY)
        return
    with Progress("sync") as progress:
        report = memory.sync(full=full, progress=progress) if not no_queries else None
        schema = None if pairs_only else memory.sync_schema(progress=progress)
        knowledge = None if pairs_only or not instructions else memory.sync_knowledge()
    out, err = render_sync(report, schema, knowledge, as_json=as_json)  # as the fast path
    for line in err:
        warn(line)
    click.echo(out, nl=False)


index = alias(sync, "index")


@click.command()
@json_option
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """Backend, embedder, counts, and whether the index matches the files."""

    memory = get_memory(ctx)
    settings = memory.settings
    data = memory.status()
    backend, unavailable = data["backend"], data["index_unavailable_reason"]
    if as_json:
        emit_json(data)
        return
    click.echo(f"backend:  {backend} (setting: {settings.backend})")
    click.echo(f"index:    {settings.index_uri}")
    if settings.is_reader:
        built = data.get("built_from")
        source = f", built from {built['project']} {built['branch']}" if built else ""
        click.echo(f"role:     reader (never writes; version {data.get('version')}{source})")
        if data.get("reader_note"):
            click.echo(f"          {data['reader_note']}")
    known = data.get("knowledge") or {}
    if unavailable is not None:
        click.echo(f"          unavailable: {unavailable}")
        if known.get("files"):
            click.echo(f"knowledge: {known['files']} files, {known['rules']} rules, "
                       f"{known['terms']} glossary terms (read from the files)")
        return
    click.echo(f"embedder: {data['embedder']} (setting: {settings.embedder})")
    if data.get("recall_fit_summary"):
        click.echo(f"fit:      {data['recall_fit_summary']}")
    click.echo(f"pairs:    {data['pairs']} files, {data['seeds']} seeds, "
               f"{data['bad_files']} unreadable; {data['rows']} rows in the index")
    schema = data.get("schema") or {}
    if schema.get("manifest"):
        click.echo(f"schema:   {schema['items']} items in the index, "
                   + ("fresh" if schema["fresh"] else f"not fresh ({schema['reason']})"))
    if known.get("files"):
        click.echo(f"knowledge: {known['files']} files, {known['rules']} rules, "
                   f"{known['terms']} glossary terms, "
                   + ("fresh" if known["fresh"] else f"not fresh ({known['reason']})"))
    for bad in data.get("unreadable") or ():
        click.echo(f"unreadable: {bad['path']}:{bad['line']}: {bad['reason']}")
    for problem in data.get("problems") or ():
        click.echo(f"damaged:  {problem}")
    if data.get("owner"):
        click.echo(f"foreign:  the index holds the pairs of another project ({data['owner']})")
    if data["fresh"]:
        click.echo("fresh:    yes")
    elif data.get("problems"):
        click.echo("fresh:    no (the index is damaged or changed: `wrenmem sync` repairs it)")
    elif data["index_missing"]:
        click.echo("fresh:    no (no index yet: run `wrenmem sync`)")
    elif data["rebuild_needed"]:
        click.echo(f"fresh:    no (built by {data['built_by']}: `wrenmem sync` rebuilds)")
    else:
        click.echo(f"fresh:    no ({'; '.join(_stale_parts(data))}: run `wrenmem sync`)")


def _stale_parts(data: dict[str, Any]) -> list[str]:
    """What is out of date, by part: the pairs' drift, the schema index, the knowledge
    table (a manifest added after the last sync leaves only the schema stale)."""
    d = data["drift"]
    pairs = (f"pairs: {d['added']} added, {d['changed']} changed, {d['removed']} removed, "
             f"{d['renamed']} renamed")
    parts = [pairs] if any(d.values()) else []
    schema = data.get("schema") or {}
    if schema.get("manifest") and not schema.get("fresh", True):
        parts.append(f"the schema index: {schema.get('reason') or 'stale'}")
    known = data.get("knowledge") or {}
    if not known.get("fresh", True):
        parts.append(f"the knowledge table: {known.get('reason') or 'stale'}")
    return parts or [pairs]


@click.command()
@json_option
@click.pass_context
def check(ctx: click.Context, as_json: bool) -> None:
    """Report drift between the files and the index by content hash, and verified pairs
    whose tables or columns changed in the manifest since (WM011); exit 1 on either."""

    memory = get_memory(ctx)
    stale = memory.stale() if memory.settings.manifest_path.is_file() else []
    for finding in stale if not as_json else ():
        click.echo(f"schema changed: {finding.render()}")
    if memory.grep_only:
        if as_json:
            emit_json({"fresh": True, "grep_only": True,
                       "stale": [p.to_dict() for p in stale]})
        else:
            click.echo("grep backend: the pair files are the index, always in sync")
        ctx.exit(1 if stale else 0)
    drift = memory.check()
    schema = memory.check_schema()
    knowledge = memory.check_knowledge()
    plan = drift.plan
    drifted = drift.drifted or not schema.fresh or not knowledge.fresh
    if as_json:
        emit_json({**drift.to_dict(), "fresh": not drifted, "schema": schema.to_dict(),
                   "knowledge": knowledge.to_dict(), "stale": [p.to_dict() for p in stale]})
    else:
        report_pair_errors(drift.errors)
        for label, items in (("added", plan.added), ("changed", plan.changed),
                             ("removed", plan.removed)):
            for item in items:
                click.echo(f"{label}: {item}")
        for old, new in plan.renamed:
            click.echo(f"renamed: {old} -> {new}")
        for problem in drift.problems:
            click.echo(f"damaged: {problem}")
        if drift.owner is not None:
            click.echo(f"foreign: the index at {memory.settings.index_uri} holds the "
                       f"pairs of another project ({drift.owner})")
        elif drift.rebuild_needed:
            click.echo(f"embedder: index built by {drift.built_by}, setting is {drift.model_id}")
        if not schema.fresh:
            click.echo(f"schema: {schema.reason}")
        if not knowledge.fresh:
            click.echo(f"knowledge: {knowledge.reason}")
        if drifted:
            warn("the index is out of date: run `wrenmem sync`")
        else:
            click.echo(f"in sync: {len(plan.unchanged)} pairs"
                       + (f", {schema.items} schema items" if schema.manifest else "")
                       + (f", {knowledge.entries} knowledge entries" if knowledge.entries
                          else ""))
    ctx.exit(1 if drifted or stale else 0)


@click.command()
@click.option("--force", "-f", is_flag=True,
              help="Accepted for Wren's scripts: reset never asks (it drops only derived data).")
@wren_path_option
@json_option
@click.pass_context
def reset(ctx: click.Context, force: bool, wren_path: str | None, as_json: bool) -> None:
    """Delete the pairs, schema and knowledge indexes and their state (the files are
    untouched; `sync` rebuilds them)."""

    wren_path_note(wren_path)
    memory = get_memory(ctx)
    settings = memory.settings
    if memory.grep_only:
        if as_json:
            emit_json({"dropped": False, "schema_dropped": False, "knowledge_dropped": False,
                       "index": settings.index_uri})
        else:
            click.echo("grep backend: no index to drop")
        return
    dropped, schema_dropped, knowledge_dropped = memory.reset().values()
    if as_json:
        emit_json({"dropped": dropped, "schema_dropped": schema_dropped,
                   "knowledge_dropped": knowledge_dropped, "index": settings.index_uri})
        return
    click.echo("dropped the pairs index" if dropped else "no pairs index to drop")
    click.echo("dropped the schema index" if schema_dropped else "no schema index to drop")
    if knowledge_dropped:
        click.echo("dropped the knowledge index")


COMMANDS = [sync, index, status, check, reset]
