"""Git workflow commands: hooks, validate, duplicates, diff."""

from __future__ import annotations

import click

from wrenmem.cli.common import emit_json, get_settings, json_option, warn


@click.group()
def hooks() -> None:
    """Git hooks that sync the index after checkout, merge, rebase and commit."""


@hooks.command(name="install")
@json_option
@click.pass_context
def hooks_install(ctx: click.Context, as_json: bool) -> None:
    """Install post-checkout, post-merge, post-rewrite and post-commit hooks.

    Hooks already there are kept: moved to <name>.legacy and run first by wrenmem's hook.
    Running install again updates wrenmem's hooks and changes nothing else.
    """
    from wrenmem.githooks import HookConflict, find_hook_repo, install_hooks

    settings = get_settings(ctx)
    target = find_hook_repo(settings.root)
    try:
        results = install_hooks(target)
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
    from wrenmem.githooks import find_hook_repo, uninstall_hooks

    settings = get_settings(ctx)
    target = find_hook_repo(settings.root)
    _print_states(uninstall_hooks(target), as_json, target.hooks_dir)


@hooks.command(name="status")
@json_option
@click.pass_context
def hooks_status(ctx: click.Context, as_json: bool) -> None:
    """Show which hooks are installed, what they chain, and whether they are current.

    Exits 1 when any of wrenmem's hooks is missing or out of date.
    """
    from wrenmem.githooks import HOOK_NAMES, find_hook_repo, hook_state

    settings = get_settings(ctx)
    target = find_hook_repo(settings.root)
    states = [hook_state(target, name) for name in HOOK_NAMES]
    if as_json:
        emit_json({"hooks_dir": str(target.hooks_dir), "hooks_path": target.hooks_path,
                   "hooks": [s.to_dict() for s in states]})
    else:
        click.echo(f"hooks directory: {target.hooks_dir}")
        for s in states:
            if s.state == "ours":
                detail = "installed" if s.current else "installed, out of date (install again)"
                if not s.python_ok:
                    detail += f"; its python {s.python} is gone (install again)"
            else:
                detail = "not wrenmem's hook" if s.state == "foreign" else "not installed"
            chained = " (chains the previous hook)" if s.legacy and s.state == "ours" else ""
            click.echo(f"  {s.name:<14} {detail}{chained}")
    if not all(s.state == "ours" and s.current and s.python_ok for s in states):
        ctx.exit(1)


@hooks.command(name="run", hidden=True, context_settings={"ignore_unknown_options": True})
@click.argument("name")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def hooks_run(ctx: click.Context, name: str, args: tuple[str, ...]) -> None:
    """What an installed hook runs: sync quietly, log, and always exit 0."""
    from wrenmem.githooks import LOG_NAME, run_hook

    try:
        settings = get_settings(ctx)
    except Exception as e:  # bad settings must not fail a checkout either
        warn(f"wrenmem: {name} hook: index not synced: {e}")
        return
    problem = run_hook(settings, name, args)
    if problem:
        warn(f"wrenmem: {name} hook: index not synced: {problem[:160]} "
             f"(see {settings.relpath(settings.state_dir / LOG_NAME)})")


def _print_states(states: list, as_json: bool, hooks_dir: object) -> None:
    if as_json:
        emit_json({"hooks_dir": str(hooks_dir), "hooks": [s.to_dict() for s in states]})
        return
    for s in states:
        click.echo(f"{s.name}: {s.action}")
    click.echo(f"hooks directory: {hooks_dir}")


COMMANDS = [hooks]
