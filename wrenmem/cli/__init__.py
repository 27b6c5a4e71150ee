"""The ``wrenmem`` command line. The only package that imports click."""

from __future__ import annotations

import logging
import sys

import click

from wrenmem import __version__
from wrenmem.errors import WrenmemError


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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
    from wrenmem.cli import exchange_cmds, pair_cmds, recall_cmds

    for module in (pair_cmds, exchange_cmds, recall_cmds):
        for command in module.COMMANDS:
            cli.add_command(command)


_register()


def main(argv: list[str] | None = None) -> None:
    """Entry point: library errors become one stderr line and exit status 1."""
    try:
        cli.main(args=argv, prog_name="wrenmem", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(1)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except click.ClickException as e:
        e.show()
        sys.exit(e.exit_code)
    except WrenmemError as e:
        click.echo(f"error: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(0)
    sys.exit(0)
