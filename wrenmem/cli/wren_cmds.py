"""``wrenmem memory …``: Wren's ``wren memory`` spellings, for scripts written for it.

``wrenmem memory recall -q Q`` is ``wrenmem recall -q Q``, and so for every command of
``wren memory --help`` (0.17), with one difference of meaning: Wren's ``export`` writes the
pairs of its LanceDB store as files, so ``wrenmem memory export [--path DIR]`` is
``wrenmem import --from-wren DIR`` (default ``.wren/memory``), not wrenmem's ``export``.
"""

from __future__ import annotations

from pathlib import Path

import click

from wrenmem.cli.common import SuggestingGroup, get_settings

# The subcommands of Wren 0.17's `wren memory --help`.
WREN_COMMANDS = ("check", "describe", "dump", "export", "fetch", "forget", "index", "list",
                 "load", "recall", "reset", "status", "store", "watch")


class WrenMemoryGroup(SuggestingGroup):
    """The commands of the top-level group under Wren's names. Wren's ``--path DIR`` (its
    LanceDB folder) is taken out of every command but ``export`` with a note: wrenmem's
    index is the setting ``index``."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] != "export":
            args = _without_path(args)
        return super().parse_args(ctx, args)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(WREN_COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name == "export":
            return wren_export
        if cmd_name not in WREN_COMMANDS:
            return None
        root = ctx.find_root()
        assert isinstance(root.command, click.Group)
        return root.command.get_command(root, cmd_name)


def _without_path(args: list[str]) -> list[str]:
    from wrenmem.cli.index_cmds import wren_path_note

    out: list[str] = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            out += [arg, *rest]
            break
        if arg in ("--path", "-p"):
            wren_path_note(next(rest, ""))
        elif arg.startswith("--path="):
            wren_path_note(arg.split("=", 1)[1])
        else:
            out.append(arg)
    return out


@click.command("export")
@click.option("--path", "-p", "path", type=click.Path(file_okay=False),
              help="Wren's LanceDB folder (default: .wren/memory in the project).")
@click.option("--include-seed", is_flag=True, help="Also the seed rows.")
@click.pass_context
def wren_export(ctx: click.Context, path: str | None, include_seed: bool) -> None:
    """Wren's `export`: write the pairs of a Wren memory store as files (the same as
    `wrenmem import --from-wren PATH --upsert`)."""
    from wrenmem.cli.exchange_cmds import import_cmd

    folder = Path(path) if path else get_settings(ctx).root / ".wren" / "memory"
    if not folder.is_dir():
        raise click.UsageError(f"no Wren memory store at {folder} (give --path DIR)")
    ctx.invoke(import_cmd, file=None, from_wren=str(folder), include_seed=include_seed,
               upsert=True, overwrite=False, dry_run=False, force=False, yes=False,
               as_json=False)


@click.group("memory", cls=WrenMemoryGroup)
def memory() -> None:
    """Wren's `wren memory` spellings: `wrenmem memory recall …` is `wrenmem recall …`
    (and so for each command; `memory export` migrates a Wren store, as Wren's does)."""


COMMANDS = [memory]
