"""Knowledge commands: rules, glossary: list them, or add an entry (``rules add``,
``glossary add``: a ``##`` entry in a file, as people write them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from wrenmem.cli.common import emit_json, get_memory, json_option, report_pair_errors

if TYPE_CHECKING:
    from wrenmem.knowledge.entries import Entry


class ListOrAdd(click.Group):
    """``rules [OPTIONS]`` lists; ``rules add …`` adds. Anything but a subcommand's name
    (an option, a glossary TERM) is the listing's."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("-h", "--help"):
            args = ["list", *args]
        elif not args:
            args = ["list"]
        return super().parse_args(ctx, args)


def _added(entry: Entry, as_json: bool) -> None:
    if as_json:
        emit_json(entry.to_dict())
    else:
        click.echo(f"added: {entry.path}:{entry.line}: [{entry.kind}] {entry.title}")


@click.group(cls=ListOrAdd)
def rules() -> None:
    """The business rules, caveats, metrics and instructions (knowledge/rules/, caveats/,
    metrics/, instructions.md): `rules [-q Q]` lists them, `rules add` writes one."""


@rules.command("add")
@click.argument("title")
@click.argument("text")
@click.option("--caveat", "kind", flag_value="caveat", help="A caveat (knowledge/caveats/).")
@click.option("--metric", "kind", flag_value="metric", help="A metric (knowledge/metrics/).")
@click.option("--rule", "kind", flag_value="rule", default=True, hidden=True)
@click.option("--file", "file", help="Append to this file of the folder (default: a file "
                                     "named after the title).")
@json_option
@click.pass_context
def rules_add(ctx: click.Context, title: str, text: str, kind: str, file: str | None,
              as_json: bool) -> None:
    """Add a rule TITLE whose text is TEXT: a `## TITLE` entry in knowledge/rules/ (with
    --caveat or --metric, caveats/ or metrics/). `fetch` serves it from then on."""
    _added(get_memory(ctx).add_rule(title, text, kind=kind, file=file), as_json)


@rules.command("list")
@click.option("-q", "--question", help="Only the rules that bear on this question (all of "
                                       "them while their text is small).")
@click.option("--threshold", type=click.IntRange(0, None),
              help="Largest rules text listed whole with -q (default: setting "
                   "`knowledge_threshold`, 8000 characters); 0 always searches.")
@json_option
@click.pass_context
def rules_list(ctx: click.Context, question: str | None, threshold: int | None,
               as_json: bool) -> None:
    """List the business rules, caveats, metrics and instructions (knowledge/rules/,
    caveats/, metrics/, instructions.md), or those for a question, as `fetch` serves them."""
    memory = get_memory(ctx)
    memory.notify = None  # unreadable files are reported once, below
    knowledge = memory.knowledge()
    report_pair_errors(knowledge.errors)
    selection = memory.rules(question, threshold=threshold)
    if as_json:
        emit_json({"question": question, **selection.to_dict(),
                   "unreadable": [{"path": e.path, "line": e.line, "reason": e.reason}
                                  for e in knowledge.errors]})
        return
    if not selection.rules:
        click.echo("no rules" + ("" if question is None else " for this question"))
        return
    for entry in selection.rules:
        click.echo(f"{entry.path}:{entry.line}: [{entry.kind}] {entry.title}")
        click.echo("".join(f"    {line}\n" for line in entry.body.splitlines()), nl=False)


@click.group(cls=ListOrAdd)
def glossary() -> None:
    """The glossary (knowledge/glossary/): `glossary [TERM]` lists the terms (those TERM
    names), `glossary add` writes one."""


@glossary.command("add")
@click.argument("term")
@click.argument("definition")
@click.option("--synonym", "-s", "synonyms", multiple=True,
              help="Another name for the term (repeatable, or a comma list).")
@click.option("--column", "-c", "columns", multiple=True,
              help="A table or table.column of the manifest it means (repeatable).")
@click.option("--file", "file", help="Append to this file of knowledge/glossary/.")
@json_option
@click.pass_context
def glossary_add(ctx: click.Context, term: str, definition: str, synonyms: tuple[str, ...],
                 columns: tuple[str, ...], file: str | None, as_json: bool) -> None:
    """Add the glossary term TERM, meaning DEFINITION: a `## TERM` entry in
    knowledge/glossary/ with its `Synonyms:` and `Columns:` lines (`validate` checks the
    columns against the manifest)."""
    split = [s.strip() for v in synonyms for s in v.split(",") if s.strip()]
    cols = [c.strip() for v in columns for c in v.split(",") if c.strip()]
    _added(get_memory(ctx).add_term(term, definition, synonyms=split, columns=cols,
                                         file=file), as_json)


@glossary.command("list")
@click.argument("term", required=False)
@json_option
@click.pass_context
def glossary_list(ctx: click.Context, term: str | None, as_json: bool) -> None:
    """List the glossary (knowledge/glossary/): each term with its synonyms, the columns it
    means and its definition. TERM (a word, a synonym or a whole question) lists only the
    terms it names."""
    memory = get_memory(ctx)
    entries = memory.glossary(term)
    if as_json:
        emit_json({"term": term, "terms": [e.to_dict() for e in entries]})
        return
    if not entries:
        click.echo("no glossary term" + ("" if term is None else f" matches {term!r}"))
        if term is not None:
            ctx.exit(1)
        return
    for entry in entries:
        names = f"{entry.title}" + (f" ({', '.join(entry.synonyms)})" if entry.synonyms else "")
        click.echo(f"{entry.path}:{entry.line}: {names}")
        if entry.columns:
            click.echo(f"    columns: {', '.join(entry.columns)}")
        click.echo("".join(f"    {line}\n" for line in entry.body.splitlines()), nl=False)


COMMANDS = [rules, glossary]
