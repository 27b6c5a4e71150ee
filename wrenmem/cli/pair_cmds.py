"""Commands over the pair files: init, store, show, list, forget, fmt."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from wrenmem.api import Memory
from wrenmem.cli.common import (
    emit_json,
    get_settings,
    json_option,
    output_option,
    report_pair_errors,
    warn,
)
from wrenmem.errors import PairError, SqlCheckError, WrenmemError
from wrenmem.fsutil import atomic_write_text
from wrenmem.index.autosync import after_write
from wrenmem.pairs.catalog import iter_pair_files, read_pair_file, scan
from wrenmem.pairs.pairfile import Pair, decode_file, parse_pair, render_pair
from wrenmem.pairs.seeds import extra_pairs
from wrenmem.pairs.store import delete_pair_file
from wrenmem.recall.bm25f import GrepBackend
from wrenmem.recall.hits import Filters
from wrenmem.settings import CONFIG_FILE, Settings, settings_help


@click.command()
@click.pass_context
def init(ctx: click.Context) -> None:
    """Create knowledge/sql/, ignore .wrenmem/ in git and write a commented wrenmem.toml."""
    settings = get_settings(ctx)
    done = []
    if not settings.knowledge_path.is_dir():
        settings.knowledge_path.mkdir(parents=True)
        done.append(f"created {settings.knowledge_dir}/")
    gitignore = settings.root / ".gitignore"
    lines = gitignore.read_text(encoding="utf-8").splitlines() if gitignore.exists() else []
    if not any(line.strip().rstrip("/") in (".wrenmem", "/.wrenmem") for line in lines):
        with gitignore.open("a", encoding="utf-8") as fh:
            if lines and lines[-1].strip():
                fh.write("\n")
            fh.write("# wrenmem derived state (index, caches, daemon socket, logs)\n.wrenmem/\n")
        done.append("added .wrenmem/ to .gitignore")
    config = settings.root / CONFIG_FILE
    if not config.exists():
        body = ["# wrenmem settings. Precedence: command-line flag > WRENMEM_* environment",
                "# variable > this file > default. Uncomment to change.", ""]
        for name, env, default, text in settings_help():
            body.append(f"# {text} ({env})")
            shown = f'"{default}"' if isinstance(default, str) else (default or '""')
            body.append(f"# {name} = {shown}")
        config.write_text("\n".join(body) + "\n", encoding="utf-8")
        done.append(f"wrote {CONFIG_FILE}")
    click.echo("\n".join(done) if done else "already initialised: nothing to do")


@click.command()
@click.option("--nl", "-q", required=True, help="The natural-language question.")
@click.option("--sql", "-s", "sql", required=True,
              help="The SQL that answers it ('-' reads stdin).")
@click.option("--datasource", "-d", help="Datasource name (default: setting `datasource`).")
@click.option("--dialect", help="sqlglot dialect of the SQL (default: the file's when the "
                                "question exists, else setting `dialect` when set, else the "
                                "manifest's data source).")
@click.option("--tag", "--tags", "-t", "tags", multiple=True,
              help="A tag; repeat or give a comma list (--tags a,b as in Wren).")
@click.option("--note", default="", help="Notes for reviewers, written below the SQL.")
@click.option("--source", help="Where the pair came from (default: user; a re-stored "
                               "question keeps its file's).")
@click.option("--folder", default="", help="Sub-folder of knowledge/sql/ for a new file.")
@click.option("--force", is_flag=True, help="Store even if the SQL does not parse.")
@json_option
@click.pass_context
def store(ctx: click.Context, nl: str, sql: str, datasource: str | None, dialect: str | None,
          tags: tuple[str, ...], note: str, source: str | None, folder: str, force: bool,
          as_json: bool) -> None:
    """Store an NL→SQL pair as a Markdown file (the same question updates its file)."""

    settings = get_settings(ctx, datasource=datasource, dialect=dialect)
    if sql == "-":
        sql = sys.stdin.read()
    if not nl.strip():
        raise click.BadParameter("the question is empty", param_hint="--nl")
    if not sql.strip():
        raise click.BadParameter("the SQL is empty", param_hint="--sql")
    notes: list[str] = []
    memory = Memory.from_settings(settings, notify=notes.append)
    try:
        # The dialect: --dialect, else the file's (re-store), else the setting when set,
        # else the manifest's data source.
        result = memory.store(nl, sql, dialect=dialect, tags=tags, note=note, source=source,
                              folder=folder, force=force)
    except SqlCheckError as e:
        for p in e.problems:
            warn(f"--sql:{p.line}:{p.col}: {p.message}")
        raise WrenmemError("not stored: fix the SQL, or pass --force to store it anyway") from e
    sync_note = notes[0] if notes else None
    if as_json:
        emit_json({"path": result.path, "created": result.created,
                   "pair": result.pair.to_dict(), "index": sync_note})
        return
    click.echo(f"{'Stored' if result.created else 'Updated'}: {result.path}")
    if sync_note:
        warn(sync_note)


def resolve_pair(settings: Settings, target: str) -> Pair:
    """A pair by file path (relative to cwd or project) or by its exact question."""
    for candidate in (Path(target), settings.root / target):
        if candidate.is_file():
            rel = settings.relpath(candidate)
            return read_pair_file(candidate, rel)[0]
    found = scan(settings)
    wanted = target.strip().casefold()
    for pair in found.pairs:
        if pair.nl.casefold() == wanted:
            return pair

    close = GrepBackend(settings).search([target], 3, Filters())[0]
    hint = ("; closest: " + "; ".join(f"{h.path} ({h.question})" for h in close)) if close else ""
    raise WrenmemError(f"no pair file or stored question matches {target!r}{hint}")


@click.command()
@click.argument("target")
@json_option
@click.pass_context
def show(ctx: click.Context, target: str, as_json: bool) -> None:
    """Show one pair, given its file path or its exact question."""
    settings = get_settings(ctx)
    pair = resolve_pair(settings, target)
    if as_json:
        data = pair.to_dict()
        data["notes"] = pair.notes
        emit_json(data)
        return
    click.echo((settings.root / pair.path).read_text(encoding="utf-8-sig"), nl=False)


@click.command(name="list")
@click.option("--source", "-s", help="Only pairs with this source (user, seed, import…).")
@click.option("--tag", "tags", multiple=True, help="Only pairs with this tag (repeatable).")
@click.option("--datasource", "-d", help="Only pairs of this datasource.")
@click.option("--limit", "-n", type=click.IntRange(0, None), help="At most this many pairs.")
@click.option("--offset", type=click.IntRange(0, None), default=0, help="Skip this many first.")
@json_option
@output_option
@click.pass_context
def list_pairs(ctx: click.Context, source: str | None, tags: tuple[str, ...],
               datasource: str | None, limit: int | None, offset: int, as_json: bool,
               output: str | None) -> None:
    """List stored pairs (bad files are reported on stderr and skipped)."""

    settings = get_settings(ctx)
    found = scan(settings)
    report_pair_errors(found.errors)
    filters = Filters(datasource=datasource, tags=tags, source=source)
    pairs = [p for p in (*found.pairs, *extra_pairs(settings)) if filters.accepts(p)]
    total = len(pairs)
    pairs = pairs[offset:] if limit is None else pairs[offset:offset + limit]
    if as_json or output == "json":
        emit_json([p.to_dict() for p in pairs])
        return
    for pair in pairs:
        tag_text = f"  [{', '.join(pair.tags)}]" if pair.tags else ""
        click.echo(f"{pair.path}\t{pair.nl}{tag_text}")
    shown = f"{offset + 1}-{offset + len(pairs)} of {total}" if len(pairs) < total else total
    warn(f"{shown} pair(s)")


@click.command()
@click.argument("targets", nargs=-1)
@click.option("--source", help="Forget every pair file with this source.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@click.pass_context
def forget(ctx: click.Context, targets: tuple[str, ...], source: str | None, yes: bool,
           as_json: bool) -> None:
    """Delete pair files, given paths or exact questions (or --source)."""

    settings = get_settings(ctx)
    if not targets and not source:
        raise click.UsageError("name at least one pair (path or question) or --source")
    pairs = [resolve_pair(settings, t) for t in targets]
    if source:
        pairs += [p for p in scan(settings).pairs if p.source == source]
    paths = sorted({p.path for p in pairs})
    if not paths:
        click.echo("nothing to forget")
        return
    if not yes:
        listing = "\n".join(f"  {p}" for p in paths)
        click.confirm(f"Delete {len(paths)} pair file(s)?\n{listing}\n", abort=True, err=True)
    for rel in paths:
        delete_pair_file(settings, rel)
    sync_note = after_write(settings, paths)
    if as_json:
        emit_json({"deleted": paths, "index": sync_note})
        return
    for rel in paths:
        click.echo(f"Deleted: {rel}")
    if sync_note:
        warn(sync_note)


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--check", is_flag=True, help="Change nothing; exit 1 if a file would change.")
@click.option("--fail-on-change", is_flag=True,
              help="Rewrite, and exit 1 if any file was changed (for pre-commit).")
@json_option
@click.pass_context
def fmt(ctx: click.Context, files: tuple[str, ...], check: bool, fail_on_change: bool,
        as_json: bool) -> None:
    """Rewrite pair files in the canonical format (Wren's front-matter `sql:` included)."""

    settings = get_settings(ctx)
    paths = [Path(f) for f in files] if files else list(iter_pair_files(settings.knowledge_path))
    changed, broken = [], []
    for path in sorted(paths):
        rel = settings.relpath(path)
        try:
            original = decode_file(path.read_bytes(), rel)
            pair = parse_pair(original, rel)
        except (OSError, PairError) as e:
            broken.append(e if isinstance(e, PairError) else PairError(rel, str(e)))
            continue
        text = render_pair(pair)
        if path.read_bytes() != text.encode("utf-8"):
            changed.append(rel)
            if not check:
                atomic_write_text(path, text)
    report_pair_errors(broken, label="not formatted")
    if as_json:
        emit_json({"changed": changed, "check": check,
                   "errors": [{"path": e.path, "line": e.line, "reason": e.reason}
                              for e in broken]})
    else:
        verb = "would reformat" if check else "reformatted"
        for rel in changed:
            click.echo(f"{verb} {rel}")
        warn(f"{len(changed)} file(s) {verb}, {len(paths) - len(changed) - len(broken)} "
             f"unchanged, {len(broken)} with errors")
    if broken or ((check or fail_on_change) and changed):
        ctx.exit(1)


COMMANDS = [init, store, show, list_pairs, forget, fmt]
