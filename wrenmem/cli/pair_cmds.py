"""Commands over the pair files: init, store, show, list, forget, fmt."""

from __future__ import annotations

import sys

import click

from wrenmem.cli.common import (
    emit_json,
    get_memory,
    json_option,
    list_each,
    output_option,
    report_pair_errors,
    verbose_option,
    warn,
)
from wrenmem.cli.progress import Progress
from wrenmem.errors import SqlCheckError, WrenmemError


@click.command()
@click.pass_context
def init(ctx: click.Context) -> None:
    """Create knowledge/sql/ and the knowledge folders rules/, glossary/, caveats/ and
    metrics/ (each with one commented example), ignore .wrenmem/ in git and write a
    commented wrenmem.toml. What exists is left alone."""
    done = get_memory(ctx).init()
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
@click.option("--force", is_flag=True,
              help="Store even if the SQL does not parse or the manifest or engine rejects "
                   "it (never SQL that writes).")
@click.option("--no-schema", is_flag=True,
              help="Do not check the SQL against the manifest (names and the engine).")
@click.option("--allow-writes", is_flag=True,
              help="Accept SQL that writes (DML, DDL…): the file says `allow-writes: true`.")
@json_option
@click.pass_context
def store(ctx: click.Context, nl: str, sql: str, datasource: str | None, dialect: str | None,
          tags: tuple[str, ...], note: str, source: str | None, folder: str, force: bool,
          no_schema: bool, allow_writes: bool, as_json: bool) -> None:
    """Store an NL→SQL pair as a Markdown file (the same question updates its file).

    The SQL must be one read-only query; with a manifest, its tables and columns must exist
    and DuckDB must bind it over empty tables of the manifest (setting `engine`). With
    `--source agent` the pair is marked `reviewed: false` until `wrenmem verify`.
    """
    if sql == "-":
        sql = sys.stdin.read()
    if not nl.strip():
        raise click.BadParameter("the question is empty", param_hint="--nl")
    if not sql.strip():
        raise click.BadParameter("the SQL is empty", param_hint="--sql")
    notes: list[str] = []
    memory = get_memory(ctx, datasource=datasource, dialect=dialect)
    memory.notify = notes.append
    try:
        with Progress("store"):
            result = memory.store(nl, sql, dialect=dialect, tags=tags, note=note,
                                  source=source, folder=folder, force=force,
                                  check_schema=not no_schema, allow_writes=allow_writes)
    except SqlCheckError as e:
        for p in e.problems:
            warn(f"--sql:{p.line}:{p.col}: {p.message}")
        if "read-only" in e.prefix:
            raise WrenmemError("not stored: the SQL writes; a pair holds one read-only query "
                               "(--allow-writes accepts it)") from e
        raise WrenmemError("not stored: fix the SQL, or pass --force to store it anyway") from e
    sync_note = "; ".join(notes) or None
    if as_json:
        index = memory.last_index.to_dict() if memory.last_index else None
        emit_json({"path": result.path, "created": result.created,
                   "changed": result.changed, "pair": result.pair.to_dict(), "index": index,
                   "notes": [n for n in notes if not n.startswith("index")]})
        return
    verb = "Stored" if result.created else "Updated" if result.changed else "Unchanged"
    click.echo(f"{verb}: {result.path}")
    if sync_note:
        warn(sync_note)


@click.command()
@click.argument("target")
@json_option
@click.pass_context
def show(ctx: click.Context, target: str, as_json: bool) -> None:
    """Show one pair, given its file path or its question (exact; else the one pair equal
    to it ignoring case; several candidates are listed, exit 1)."""
    memory = get_memory(ctx)
    pair = memory.get(target)
    if as_json:
        data = pair.to_dict()
        data["notes"] = pair.notes
        emit_json(data)
        return
    click.echo((memory.root / pair.path).read_text(encoding="utf-8-sig"), nl=False)


@click.command(name="list")
@click.option("--source", "-s", help="Only pairs with this source (user, seed, import…).")
@click.option("--tag", "tags", multiple=True, help="Only pairs with this tag (repeatable).")
@click.option("--datasource", "-d", help="Only pairs of this datasource.")
@click.option("--limit", "-n", type=click.IntRange(0, None), help="At most this many pairs.")
@click.option("--offset", type=click.IntRange(0, None), default=0, help="Skip this many first.")
@click.option("--uses", "uses", multiple=True, metavar="TABLE[.COLUMN]",
              help="Only pairs whose SQL uses this table or column of the manifest "
                   "(repeatable: any of them).")
@click.option("--verified", is_flag=True, help="Only pairs a person verified.")
@json_option
@output_option
@click.pass_context
def list_pairs(ctx: click.Context, source: str | None, tags: tuple[str, ...],
               datasource: str | None, limit: int | None, offset: int, uses: tuple[str, ...],
               verified: bool, as_json: bool, output: str | None) -> None:
    """List stored pairs (bad files are reported on stderr and skipped)."""

    memory = get_memory(ctx)
    pairs = memory.list(source=source, tags=tags, datasource=datasource, verified=verified)
    used: dict[str, tuple[str, ...]] = {}
    if uses:
        found = memory.using(uses, pairs)
        pairs = [p for p, _items in found]
        used = {p.path: items for p, items in found}
    total = len(pairs)
    pairs = pairs[offset:] if limit is None else pairs[offset:offset + limit]
    if as_json or output == "json":
        emit_json([{**p.to_dict(), **({"uses": list(used[p.path])} if uses else {})}
                   for p in pairs])
        return
    for pair in pairs:
        tag_text = f"  [{', '.join(pair.tags)}]" if pair.tags else ""
        uses_text = f"  uses {', '.join(used[pair.path])}" if uses else ""
        click.echo(f"{_field(pair.path)}\t{_field(pair.nl)}{_field(tag_text)}{uses_text}")
    shown = f"{offset + 1}-{offset + len(pairs)} of {total}" if len(pairs) < total else total
    warn(f"{shown} pair(s)")


_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _field(text: str) -> str:
    """One tab-separated field on one line: a tab or newline in a file name or a question
    is written as ``\\t`` / ``\\n`` (and a backslash as ``\\\\``)."""
    return text.translate(_ESCAPES)


@click.command()
@click.argument("targets", nargs=-1)
@click.option("--source", help="Forget every pair file with this source.")
@click.option("--yes", "-y", "--force", "yes", is_flag=True,
              help="Do not ask for confirmation (--force: Wren's spelling).")
@click.option("--id", "pair_id", hidden=True, help="Wren's spelling: refused with a hint.")
@json_option
@click.pass_context
def forget(ctx: click.Context, targets: tuple[str, ...], source: str | None, yes: bool,
           pair_id: str | None, as_json: bool) -> None:
    """Delete pair files, given paths or questions (or --source).

    A question names the pair of exactly that question; else the one pair equal to it
    ignoring case. Several candidates: nothing is deleted, they are listed."""
    if pair_id is not None:
        raise click.UsageError(
            f"--id {pair_id}: wrenmem has no numeric ids (Wren's `forget --id`); a pair is "
            "named by its file path or its question: `wrenmem list` shows both, e.g. "
            "`wrenmem forget knowledge/sql/<name>.md`")
    if not targets and not source:
        raise click.UsageError("name at least one pair (path or question) or --source")
    memory = get_memory(ctx)
    pairs = [memory.get(t) for t in targets]
    if source:
        pairs += memory.list(source=source, seeds=False)
    paths = sorted({p.path for p in pairs})
    if not paths:
        click.echo("nothing to forget")
        return
    if not yes:
        listing = "\n".join(f"  {p}" for p in paths)
        click.confirm(f"Delete {len(paths)} pair file(s)?\n{listing}\n", abort=True, err=True)
    notes: list[str] = []
    memory.notify = notes.append
    with Progress("forget"):
        deleted = memory.forget(paths)
    sync_note = "; ".join(notes) or None
    if as_json:
        index = memory.last_index.to_dict() if memory.last_index else None
        emit_json({"deleted": deleted, "index": index,
                   "notes": [n for n in notes if not n.startswith("index")]})
        return
    for rel in deleted:
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
    report = get_memory(ctx).fmt(files or None, check=check)
    report_pair_errors(report.errors, label="not formatted")
    if as_json:
        emit_json(report.to_dict())
    else:
        verb = "would reformat" if check else "reformatted"
        for rel in report.changed:
            click.echo(f"{verb} {rel}")
        warn(f"{len(report.changed)} file(s) {verb}, {report.unchanged} unchanged, "
             f"{len(report.errors)} with errors")
    if report.errors or ((check or fail_on_change) and report.changed):
        ctx.exit(1)


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--by", "by", help="Who verifies (default: git config user.name <user.email>).")
@click.option("--force", is_flag=True, help="Verify even a pair that does not validate.")
@verbose_option
@json_option
@click.pass_context
def verify(ctx: click.Context, files: tuple[str, ...], by: str | None, force: bool,
           verbose: int, as_json: bool) -> None:
    """Mark pairs verified: who and when, and fingerprints of the question, phrasings, SQL,
    dialect and datasource and of the tables and columns it uses (editing any of them, or a
    change of those in the manifest, shows again).

    What a reviewer runs in a pull request. A pair that does not validate is refused (exit
    1) unless --force. Replacing another reviewer's verification is said (on stderr). Each
    pair verified is named when there are a few; past 20, only the counts, unless -v (a
    pair refused is always named).
    """
    memory = get_memory(ctx)
    notes: list[str] = []
    memory.notify = notes.append
    with Progress("verify") as shown:
        results = memory.verify(files, by=by, force=force,
                                progress=shown.counter("files verified"))
    if as_json:
        emit_json([r.to_dict() for r in results])
    else:
        each = list_each(ctx, verbose, len(results))
        for r in results:
            if not r.ok and not force:
                click.echo(f"not verified: {r.path}")
                for p in r.problems:
                    warn(f"  {p.render()}")
                continue
            who = r.pair.extra.get("verified_by") if r.pair else by
            if each:
                click.echo(f"{'verified' if r.changed else 'already verified'}: {r.path} "
                           f"(by {who})")
            if r.replaced:
                at = f" at {r.replaced[1]}" if r.replaced[1] else ""
                warn(f"  replaces the verification by {r.replaced[0]}{at}"
                     + ("" if each else f": {r.path}"))
        if not each:
            done = [r for r in results if r.ok or force]
            changed = sum(1 for r in done if r.changed)
            click.echo(f"verified: {changed} pair(s), {len(done) - changed} already verified"
                       f", {len(results) - len(done)} not verified (-v names each)")
    if notes:
        warn("; ".join(notes))
    if any(not r.ok for r in results) and not force:
        ctx.exit(1)


COMMANDS = [init, store, show, list_pairs, forget, fmt, verify]
