"""The ``wrenmem`` command line. The only package that imports click."""

from __future__ import annotations

import logging
import sys

import click

from wrenmem import __version__
from wrenmem.errors import WrenmemError


class WrenmemGroup(click.Group):
    """Turns library errors into one ``error: ...`` line on stderr and exit status 1."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except WrenmemError as e:
            raise WrenmemClickError(str(e)) from e


class WrenmemClickError(click.ClickException):
    def show(self, file: object = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True)


@click.group(cls=WrenmemGroup,
             context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="wrenmem")
@click.option("--project", "-P", type=click.Path(file_okay=False), envvar="WRENMEM_PROJECT",
              help="Project root (default: nearest folder up with wrenmem.toml, knowledge/ "
                   "or .git).")
@click.option("-v", "--verbose", count=True, help="More diagnostics on stderr.")
@click.pass_context
def cli(ctx: click.Context, project: str | None, verbose: int) -> None:
    """Memory for text-to-SQL agents: NL→SQL pairs as Markdown files in git, recalled on demand,
    with schema context from a Wren MDL manifest."""
    logging.basicConfig(level=logging.WARNING - 10 * min(verbose, 2),
                        format="wrenmem: %(message)s")
    ctx.obj = {"project": project}


def _register() -> None:
    from wrenmem.cli import (
        exchange_cmds,
        git_cmds,
        index_cmds,
        pair_cmds,
        recall_cmds,
        schema_cmds,
        watch_cmds,
    )

    for module in (pair_cmds, exchange_cmds, recall_cmds, schema_cmds, index_cmds, watch_cmds,
                   git_cmds):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        cli.main(args=argv, prog_name="wrenmem")
    except BrokenPipeError:
        sys.exit(0)
