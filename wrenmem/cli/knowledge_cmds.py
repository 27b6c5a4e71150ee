"""Knowledge commands: rules, glossary (the files are edited by people; these list them)."""

from __future__ import annotations

import click

from wrenmem.cli.common import emit_json, get_memory, json_option, report_pair_errors


@click.command()
@click.option("-q", "--question", help="Only the rules that bear on this question (all of "
                                       "them while their text is small).")
@click.option("--threshold", type=click.IntRange(0, None),
              help="Largest rules text listed whole with -q (default: setting "
                   "`knowledge_threshold`, 8000 characters); 0 always searches.")
@json_option
@click.pass_context
def rules(ctx: click.Context, question: str | None, threshold: int | None,
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


@click.command()
@click.argument("term", required=False)
@json_option
@click.pass_context
def glossary(ctx: click.Context, term: str | None, as_json: bool) -> None:
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
