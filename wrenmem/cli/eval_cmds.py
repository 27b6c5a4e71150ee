"""eval: the memory measured on the team's own pairs."""

from __future__ import annotations

from typing import Any

import click

from wrenmem.cli.common import emit_json, get_settings, json_option, warn
from wrenmem.cli.progress import Progress

BACKEND_RUNS = ("grep", "vector", "hybrid")
FUSION_RUNS = ("learned", "rrf", "linear")


def _names(text: str, allowed: tuple[str, ...], what: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    wrong = [n for n in names if n not in allowed]
    if wrong or not names:
        raise click.BadParameter(f"expected {what} from {', '.join(allowed)}, got {text!r}")
    return names


class _Fraction(click.FloatRange):
    """A number in [0, 1]: ``nan`` too is refused (every comparison with it is false, so a
    gate of nan would never fail)."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        number = super().convert(value, param, ctx)
        if number != number:
            self.fail(f"{value!r} is not a number in the range 0.0<=x<=1.0 (a fraction, "
                      "such as 0.6)", param, ctx)
        return float(number)


@click.command("eval")
@click.option("--backends", default=",".join(BACKEND_RUNS), show_default=True,
              help="Comma-separated backends to measure.")
@click.option("--fusions", default=",".join(FUSION_RUNS), show_default=True,
              help="Comma-separated fusions of the hybrid backend to measure.")
@click.option("--limit", type=click.IntRange(0), default=500, show_default=True,
              help="At most this many questions per task (spread evenly; 0: all).")
@click.option("--fail-under", type=_Fraction(0.0, 1.0),
              help="Exit 1 when the default backend's R@1 on a task is below this, or when "
                   "there is nothing to measure.")
@click.option("--misses", is_flag=True,
              help="Also list the questions the configured backend does not answer right "
                   "first: what came first, and where the right answer came.")
@json_option
@click.pass_context
def eval_(ctx: click.Context, backends: str, fusions: str, limit: int,
          fail_under: float | None, misses: bool, as_json: bool) -> None:
    """Measure recall on this project's own pairs, leaving each question out in turn.

    Answered before: a question whose SQL is stored under another phrasing (another file
    with the same SQL, or the pair's own `also:` list) must find it. New question: a SQL
    whose skeleton (values masked) other SQLs share is left out whole; a pair of the same
    skeleton must come first. Gold: the questions of knowledge/eval.json, each with the
    pair it expects. Reports R@1 (with a 95 % interval), R@5, MRR and the
    calibration error of the scores, per backend and fusion. `--misses` lists the
    questions the configured backend gets wrong, to mend with `also:` phrasings or clearer
    questions.
    """
    from wrenmem.api import Memory

    backend_names = _names(backends, BACKEND_RUNS, "backends")
    fusion_names = _names(fusions, FUSION_RUNS, "fusions")
    memory = Memory.from_settings(get_settings(ctx), notify=warn)
    if fail_under is not None:
        # the gate reads the configured backend's run: one this eval would not make would
        # pass whatever the pairs are, so it is refused before anything is measured
        run = memory.default_run(notify=False)  # evaluate says it, once
        name, _, fusion = run.partition(":")
        if name not in backend_names or (fusion and fusion not in fusion_names):
            raise click.UsageError(
                f"--fail-under gates the configured backend ({run}), which "
                f"this eval does not measure (--backends {backends}"
                + (f" --fusions {fusions}" if fusion else "") + f"): add {name}"
                + (f" and fusion {fusion}" if fusion else "") + ", or leave the option out")
    with Progress("eval") as shown:
        report = memory.evaluate(backends=backend_names, fusions=fusion_names, limit=limit,
                                 misses=misses, progress=shown.counter("questions asked"),
                                 embedded=shown)
    failed = []
    default = report["runs"].get(report["default"], {})
    if fail_under is not None and not default and not report["nothing_to_measure"]:
        # asked for, but not made: this install has no index backend to measure it with
        raise click.UsageError(
            f"--fail-under gates the configured backend ({report['default']}), which this "
            "install cannot measure: install the index extra, or configure backend = "
            '"grep" (or "auto")')
    if fail_under is not None:
        failed = [task for task, m in default.items() if "R@1" in m and m["R@1"] < fail_under]
    report["fail_under"] = fail_under
    report["failed"] = failed
    if as_json:
        emit_json(report)
    else:
        click.echo(render(report), nl=False)
    if failed:
        warn(f"eval: R@1 of {report['default']} below {fail_under} on: {', '.join(failed)}")
        ctx.exit(1)
    if fail_under is not None and report["nothing_to_measure"]:
        # a gate that measured nothing must not pass
        warn(f"eval: --fail-under {fail_under} not met: {report['nothing_to_measure']}")
        ctx.exit(1)


def render(report: dict) -> str:
    probes = report["probes"]
    lines = [f"answered before: {probes.get('answered', 0)} questions, "
             f"new question: {probes.get('new', 0)} questions"
             + (f", gold file: {probes['gold']} questions" if probes.get("gold") else "")
             + (f", no answer stored: {probes['none']} questions" if probes.get("none")
                else "")]
    if report["nothing_to_measure"]:
        lines.append(report["nothing_to_measure"])
        return "\n".join(lines) + "\n"
    lines.append(f"{'run':16s} {'task':9s} {'n':>5s} {'R@1':>6s} {'95% interval':>14s} "
                 f"{'R@5':>6s} {'MRR':>6s} {'ECE':>6s}")
    for name, tasks in report["runs"].items():
        mark = " *" if name == report["default"] else ""
        for task, m in tasks.items():
            if task == "none":  # questions nothing stored answers: how low they score
                low, high = m["under_min_score_interval"]
                kept = ("" if m.get("answered_kept") is None else
                        f"; right first (answered before, gold): {m['answered_kept']:.3f} of "
                        f"{m['answered_right']} score {m['min_score']} or more")
                lines.append(f"{name + mark:16s} {task:9s} {m['n']:5d} "
                             f"{m['under_min_score']:.3f} ({low:.3f}-{high:.3f}) of them "
                             f"score below {m['min_score']} (highest "
                             f"{m['max_top_score']:.3f}){kept}")
                continue
            low, high = m["R@1_interval"]
            lines.append(f"{name + mark:16s} {task:9s} {m['n']:5d} {m['R@1']:6.3f} "
                         f"{f'{low:.3f}-{high:.3f}':>14s} {m['R@5']:6.3f} {m['MRR']:6.3f} "
                         f"{m['ECE']:6.3f}")
    lines.append("* the configured backend (what `recall` uses)")
    if report.get("fit") is not None:
        from wrenmem.recall.fitreport import render_fit

        lines += render_fit(report["fit"])
    if "misses" in report:
        lines += render_misses(report["misses"], report["default"])
    return "\n".join(lines) + "\n"


def render_misses(misses: list[dict] | None, default: str) -> list[str]:
    """The questions the configured backend did not answer right first, a block each."""
    if misses is None:
        return [f"misses: the configured backend ({default}) was not measured; "
                "add it to --backends (and --fusions)"]
    if not misses:
        return [f"{default} answers every question right first"]
    lines = [f"missed by {default} ({len(misses)}): the question, its file, what came first, "
             "and where the right answer came"]
    for m in misses:
        lines.append(f"- [{m['task']}] {m['question']}  ({m['path']})")
        if m["first"] is None:
            lines.append("    first: nothing")
        else:
            lines.append(f"    first: {m['first']}  score={m['first_score']:.3g}  "
                         f"\"{m['first_question']}\"")
        where = (f"rank {m['right_rank']}: {m['right_path']}" if m["right_rank"]
                 else "not among the answers")
        lines.append(f"    right: {where}")
    return lines


COMMANDS = [eval_]
