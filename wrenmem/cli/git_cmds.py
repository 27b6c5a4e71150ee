"""Git workflow commands: hooks, validate, duplicates, diff."""

from __future__ import annotations

from pathlib import Path

import click

from wrenmem.cli.common import (
    SuggestingGroup,
    emit_json,
    get_memory,
    get_settings,
    json_option,
    warn,
)
from wrenmem.cli.progress import Progress
from wrenmem.git.diffrender import render_github, render_markdown, render_text, summary_line
from wrenmem.git.hooks import (
    HOOK_NAMES,
    LOG_NAME,
    HookConflict,
    HookState,
    find_hook_repo,
    hook_state,
    install_hooks,
    python_problem,
    uninstall_hooks,
)


@click.group(cls=SuggestingGroup)
def hooks() -> None:
    """Git hooks that sync the index after checkout, merge, rebase, commit, reset and stash."""


@hooks.command(name="install")
@click.option("--background", is_flag=True,
              help="Sync after git returns, in the background (the index lags for the time "
                   "a sync takes; the outcome is in .wrenmem/hooks.log).")
@json_option
@click.pass_context
def hooks_install(ctx: click.Context, background: bool, as_json: bool) -> None:
    """Install post-checkout, post-merge, post-rewrite, post-commit and reference-transaction
    hooks.

    Hooks already there are kept: moved to <name>.wrenmem-legacy and run first by wrenmem's hook.
    Running install again updates wrenmem's hooks and changes nothing else.
    """

    settings = get_settings(ctx)
    target = find_hook_repo(settings.root)
    try:
        results = install_hooks(target, background=background)
    except HookConflict as e:
        _print_states(e.results, as_json, target.hooks_dir)
        raise
    _print_states(results, as_json, target.hooks_dir)
    if target.hooks_path and not as_json:
        warn(f"note: core.hooksPath is set ({target.hooks_path}): hooks written there")


@hooks.command(name="uninstall")
@json_option
@click.pass_context
def hooks_uninstall(ctx: click.Context, as_json: bool) -> None:
    """Remove wrenmem's hooks and put back the hooks they had chained."""

    settings = get_settings(ctx)
    target = find_hook_repo(settings.root)
    _print_states(uninstall_hooks(target), as_json, target.hooks_dir)


@hooks.command(name="status")
@json_option
@click.pass_context
def hooks_status(ctx: click.Context, as_json: bool) -> None:
    """Show which hooks are installed, what they chain, and whether they are current.

    Runs each hook's recorded Python as the hook does (`python -m wrenmem --version`).
    Exits 1 when any of wrenmem's hooks is missing, out of date, or its Python cannot run
    wrenmem.
    """

    settings = get_settings(ctx)
    target = find_hook_repo(settings.root)
    states = [hook_state(target, name) for name in HOOK_NAMES]
    checked: dict[tuple[str | None, str | None], str | None] = {}
    problems: dict[str, str | None] = {}
    for s in states:
        if s.state in ("ours", "chained"):
            key = (s.python, s.import_path)
            if key not in checked:
                checked[key] = python_problem(s, target.worktree)
            problems[s.name] = checked[key]
    if as_json:
        emit_json({"hooks_dir": str(target.hooks_dir), "hooks_path": target.hooks_path,
                   "hooks": [{**s.to_dict(), "runs": s.name in problems
                              and problems[s.name] is None,
                              "problem": problems.get(s.name)} for s in states]})
    else:
        click.echo(f"hooks directory: {target.hooks_dir}")
        for s in states:
            if s.state in ("ours", "chained"):
                detail = "installed" if s.current else "installed, out of date (install again)"
                if s.state == "chained":
                    detail += " (run by another tool's hook)"
                if problems.get(s.name):
                    detail += f"; {problems[s.name]} (install again)"
            else:
                detail = "not wrenmem's hook" if s.state == "foreign" else "not installed"
            chained = " (chains the previous hook)" if s.legacy and s.state == "ours" else ""
            click.echo(f"  {s.name:<14} {detail}{chained}")
    if not all(s.state in ("ours", "chained") and s.current and problems.get(s.name) is None
               for s in states):
        ctx.exit(1)


@hooks.command(name="run", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hooks_run(ctx: click.Context, name: str, args: tuple[str, ...]) -> None:
    """What an installed hook runs: sync quietly, log, and always exit 0."""

    try:
        memory = get_memory(ctx)
    except Exception as e:  # bad settings must not fail a checkout either
        warn(f"wrenmem: {name} hook: index not synced: {e}")
        return
    problem = memory.run_hook(name, args)
    if problem:
        settings = memory.settings
        warn(f"wrenmem: {name} hook: index not synced: {problem[:160]} "
             f"(see {settings.relpath(settings.state_dir / LOG_NAME)})")


def _print_states(states: list[HookState], as_json: bool, hooks_dir: Path) -> None:
    if as_json:
        emit_json({"hooks_dir": str(hooks_dir), "hooks": [s.to_dict() for s in states]})
        return
    for s in states:
        click.echo(f"{s.name}: {s.action}")
    click.echo(f"hooks directory: {hooks_dir}")


FORMAT_HELP = ("text: `path:line:col: CODE message`; github: GitHub Actions annotations "
               "(`::error file=…,line=…,col=…::…`) that land on the lines of a pull request.")


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@click.option("--no-schema", is_flag=True,
              help="Do not check tables and columns against the manifest.")
@click.option("--format", "fmt", type=click.Choice(["text", "github"]), default="text",
              show_default=True, help=FORMAT_HELP)
@json_option
@click.pass_context
def validate(ctx: click.Context, files: tuple[Path, ...], no_schema: bool, fmt: str,
             as_json: bool) -> None:
    """Check pair files: each parses; its SQL is one read-only, well-formed statement in its
    dialect; and, with a manifest, every table and column it names exists, DuckDB binds it
    over empty tables of the manifest, and what it used when verified is unchanged.

    FILES default to every pair file of the project. One `path:line:col: CODE message` line
    per problem, the line being the pair file's. Exit 1 if there is any (a WM010 note is
    shown but does not fail). Needs no index.
    A pair accepts a finding with `wrenmem-ignore: [WM004]` in its front matter; the
    `ignore` setting accepts codes project-wide.
    """

    memory = get_memory(ctx)
    with Progress("validate") as shown:
        count, problems = memory.validate_files(files or None, schema=not no_schema,
                                                progress=shown.counter("files checked"))
    errors = [p for p in problems if p.is_error]
    if as_json:
        emit_json({"files": count, "ok": not errors,
                   "problems": [p.to_dict() for p in problems]})
    else:
        for problem in problems:
            click.echo(problem.github() if fmt == "github" else problem.render())
        if problems or not files:
            notes = len(problems) - len(errors)
            warn(f"{count} file(s) checked, {len(errors)} problem(s)"
                 + (f", {notes} note(s)" if notes else ""))
    if errors:
        ctx.exit(1)


@click.command()
@click.argument("files", nargs=-1, type=click.Path(dir_okay=False, path_type=Path))
@json_option
@click.pass_context
def duplicates(ctx: click.Context, files: tuple[Path, ...], as_json: bool) -> None:
    """Find the same question twice, or one question with two different SQLs.

    Every pair file of the project is compared; with FILES, only problems in those files are
    reported (what pre-commit needs). Exit 1 if there is any.
    """

    count, problems = get_memory(ctx).duplicates(files or None)
    if as_json:
        emit_json({"files": count, "ok": not problems,
                   "problems": [p.to_dict() for p in problems]})
    else:
        for problem in problems:
            click.echo(problem.render())
    if problems:
        ctx.exit(1)


@click.command()
@click.argument("base", required=False)
@click.argument("head", required=False)
@click.option("--format", "fmt", type=click.Choice(["markdown", "text", "github"]),
              default="markdown", show_default=True,
              help="markdown: a pull-request comment (with a hidden marker, "
                   "<!-- wrenmem-diff -->, a bot finds to update one comment); text: one line "
                   "per pair; github: an annotation per problem of an added or changed pair.")
@click.option("--direct", is_flag=True,
              help="Compare with BASE itself, not with the merge base of BASE and HEAD.")
@click.option("--fail-on-invalid", is_flag=True,
              help="Exit 1 when an added or changed pair does not validate.")
@click.option("--no-schema", is_flag=True,
              help="Do not check tables and columns against the manifest.")
@json_option
@click.pass_context
def diff(ctx: click.Context, base: str | None, head: str | None, fmt: str, direct: bool,
         fail_on_invalid: bool, no_schema: bool, as_json: bool) -> None:
    """Pairs added, changed and removed between BASE and HEAD, with their SQL and validation.

    BASE defaults to HEAD and HEAD to the working tree: `wrenmem diff main` is what a branch
    changes since it left main (like `git diff main...`; --direct compares with main's tip).
    """

    memory = get_memory(ctx)
    result = memory.diff(base, head, merge_base=not direct, schema=not no_schema)
    if as_json:
        emit_json(result.to_dict())
    elif fmt == "markdown":
        click.echo(render_markdown(result), nl=False)
    elif fmt == "github":
        for line in render_github(result, memory.settings.root):
            click.echo(line)
        warn(summary_line(result))
    else:
        click.echo(render_text(result))
    if fail_on_invalid and result.invalid:
        ctx.exit(1)


COMMANDS = [hooks, validate, duplicates, diff]
