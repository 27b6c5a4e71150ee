"""Helpers shared by the command modules: settings from flags, output, errors."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from wrenmem.errors import PairError
from wrenmem.settings import Settings, find_project_root, load_settings

if TYPE_CHECKING:
    from wrenmem.api import Memory

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (stable keys).")
# Wren's spelling of the same choice: `-o json` is --json, `-o table` the default text.
output_option = click.option("-o", "--output", "output", type=click.Choice(["json", "table"]),
                             help="json (as --json) or table (the default text), as in Wren.")


# Commands that write many files name each one up to this many; past it, counts (-v: all).
LIST_AT_MOST = 20
verbose_option = click.option("-v", "--verbose", "verbose", count=True,
                              help=f"Name every file (past {LIST_AT_MOST}, only counts).")


def list_each(ctx: click.Context, verbose: int, count: int) -> bool:
    """Whether a command names each of ``count`` files: a few, or when asked with ``-v``
    (the command's own or the global one, ``wrenmem -v …``)."""
    root_obj = ctx.find_root().obj or {}
    return count <= LIST_AT_MOST or verbose + int(root_obj.get("verbose") or 0) > 0


def get_settings(ctx: click.Context, **overrides: Any) -> Settings:
    """Settings for this command: flags given here override env, wrenmem.toml and defaults."""
    root_obj = ctx.find_root().obj or {}
    project = root_obj.get("project")
    root = Path(project).resolve() if project else find_project_root()
    # (a command line the daemon runs for a client resolves with the client's variables)
    return load_settings(root, {k: v for k, v in overrides.items() if v is not None},
                         environ=root_obj.get("environ"))


def get_memory(ctx: click.Context, **overrides: Any) -> Memory:
    """The project's :class:`Memory` for this command: flags override the other settings;
    recall, fetch and status ask a running watcher first; notes go to stderr."""
    # The API is loaded here, on first use, not when this module is: `recall` (the call an
    # agent makes most) skips it and starts as fast as a scan of the files.
    from wrenmem.api import Memory

    memory = Memory.from_settings(get_settings(ctx, **overrides), use_daemon=True, notify=warn)
    memory.via = (ctx.find_root().obj or {}).get("via")  # the daemon's, when it runs this
    return memory


class SuggestingGroup(click.Group):
    """A group whose mistyped command says the close names: ``wrenmem sotre`` asks "did
    you mean 'store'?" (difflib, over every command, loaded or not)."""

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        name = str(args[0]) if args else ""
        if (name and not name.startswith("-") and not ctx.resilient_parsing
                and self.get_command(ctx, name) is None):
            hint = close_names(name, self.list_commands(ctx))
            raise click.UsageError(f"No such command {name!r}.{hint}", ctx)
        return super().resolve_command(ctx, args)


def close_names(name: str, known: Iterable[str]) -> str:
    """`` Did you mean 'a' or 'b'?`` for the names of ``known`` close to ``name`` (else
    ``""``): what a mistyped command says (a setting's, in wrenmem.settings, is its own)."""
    import difflib

    close = difflib.get_close_matches(name, sorted(set(known)), n=3, cutoff=0.6)
    return f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2, sort_keys=False))


def warn(message: str) -> None:
    click.echo(message, err=True)


def report_pair_errors(errors: Iterable[PairError], *, label: str = "skipped") -> int:
    """One ``path:line: reason`` line per bad file on stderr; returns how many."""
    count = 0
    for error in errors:
        warn(f"{error.location()}: {error.reason} ({label})")
        count += 1
    return count


def alias(command: click.Command, name: str) -> click.Command:
    """``command`` under another name (Wren's spelling), same options and behaviour."""
    return click.Command(name, callback=command.callback, params=list(command.params),
                         help=f"Same as `{command.name}` (Wren's name for it).",
                         short_help=f"Same as {command.name} (Wren's name).")
