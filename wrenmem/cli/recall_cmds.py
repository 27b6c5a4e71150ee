"""recall: the stored pairs most similar to one or more questions."""

from __future__ import annotations

import json
from pathlib import Path

import click

from wrenmem.cli.common import emit_json, get_memory, json_option, output_option, warn
from wrenmem.errors import WrenmemError
from wrenmem.fs.fsutil import read_text_file
from wrenmem.pairs.catalog import scan
from wrenmem.recall.hits import require_questions
from wrenmem.recall.render import render_text, wren_rows
from wrenmem.settings import BACKENDS
from wrenmem.sql.draft import draft_note
from wrenmem.watch.process import start_on_demand

MAX_QUESTIONS_BYTES = 64 * 1024 * 1024


def read_questions(path: Path) -> list[str]:
    """Questions from a file: a JSON list (strings or objects with "question"), else lines."""
    text = read_text_file(path, MAX_QUESTIONS_BYTES)
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise WrenmemError(f"{path}:{e.lineno}: not valid JSON: {e.msg}") from e
        except RecursionError as e:
            raise WrenmemError(f"{path}: JSON nested too deeply") from e
        if not isinstance(data, list):
            raise WrenmemError(f"{path}: expected a JSON list of questions")
        out = []
        for n, item in enumerate(data, 1):
            question = item.get("question") if isinstance(item, dict) else item
            if not isinstance(question, str):
                raise WrenmemError(f"{path}: item #{n} has no question text")
            out.append(question)
        return out
    return [line.strip() for line in text.splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@click.command()
@click.option("--query", "-q", "queries", multiple=True, help="A question (repeatable).")
@click.option("--queries", "queries_file", type=click.Path(exists=True, dir_okay=False),
              help="A file of questions: one per line, or a JSON list.")
@click.option("-k", "-l", "--limit", "k", default=3, show_default=True,
              type=click.IntRange(1, 1000), help="How many pairs per question.")
@click.option("--datasource", "-d", help="Only pairs of this datasource.")
@click.option("--tag", "tags", multiple=True, help="Only pairs with this tag (repeatable).")
@click.option("--source", help="Only pairs with this source (user, seed…).")
@click.option("--verified", is_flag=True, help="Only pairs a person verified (wrenmem verify).")
@click.option("--backend", "-b", type=click.Choice(BACKENDS),
              help="grep, vector, hybrid or auto (default: setting `backend`).")
@click.option("--min-score", type=click.FloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="Leave out hits scoring below this (scores are in [0, 1] and mean the "
                   "same for every backend: the estimated chance the pair answers).")
@click.option("--sql", "draft_sql", metavar="DRAFT",
              help="Your draft SQL for the question(s): passed to the scorer, which may "
                   "rank pairs of a similar SQL shape higher.")
@json_option
@output_option
@click.option("--format", "row_format", type=click.Choice(["wrenmem", "wren"]),
              default="wrenmem", show_default=True,
              help="wren: JSON rows shaped like Wren's (nl_query, sql_query, _distance…).")
@click.pass_context
def recall(ctx: click.Context, queries: tuple[str, ...], queries_file: str | None, k: int,
           datasource: str | None, tags: tuple[str, ...], source: str | None,
           verified: bool, backend: str | None, min_score: float, draft_sql: str | None,
           as_json: bool, output: str | None, row_format: str) -> None:
    """Recall the stored NL→SQL pairs most similar to each question."""

    questions = list(queries) + (read_questions(Path(queries_file)) if queries_file else [])
    if not questions and queries_file:
        raise click.UsageError(f"{queries_file} holds no question (one a line, '#' lines "
                               "ignored, or a JSON list)")
    if not questions:
        raise click.UsageError("give a question with -q, or a file with --queries")
    require_questions(questions)
    memory = get_memory(ctx, backend=backend)  # the running watcher answers warm when it can
    results = memory.recall_many(questions, k, datasource=datasource, tags=tags, source=source,
                                 min_score=min_score, sql=draft_sql, verified=verified)
    if memory.use_daemon and not memory.daemon_answered:
        # no watcher answered (none running, or it refused): start one in the background
        # (the ``daemon`` setting, on-demand by default), so the next call is answered warm
        start_on_demand(memory.settings)
    drafted = draft_note(draft_sql, results[0].backend) if results else None
    if drafted is not None:
        warn(f"recall: {drafted}")
    if row_format == "wren":
        created = {p.path: p.created_at for p in scan(memory.settings).pairs}
        emit_json(wren_rows(results, created))
        return
    if as_json or output == "json":
        emit_json([r.to_dict() for r in results])
        return
    click.echo(render_text(results), nl=False)


COMMANDS = [recall]
