"""``wrenmem``: the console script and ``python -m wrenmem``.

A one-shot ``recall`` or ``fetch`` is first handed whole to the project's warm daemon, if one
runs (:mod:`wrenmem.watch.forward`: no click, no settings, no Memory imported here); the
daemon runs it with the same click command and this process prints what it printed. When it
declines (help, a path option, an error, a warning, another project or version of the
code, no daemon at all), the command runs here through click, as every other command does.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from wrenmem.lazy import lazy
from wrenmem.watch.forward import forward

if TYPE_CHECKING:
    import wrenmem.cli as cli
    from wrenmem.index import noop
else:  # imported only when the daemon did not answer (wrenmem/lazy.py)
    cli, noop = lazy("wrenmem.cli"), lazy("wrenmem.index.noop")


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: exits with the command's status."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = forward(args)
        if code is None and args[:1] and args[0] in ("sync", "index"):
            code = noop.noop_sync(args)  # nothing to sync: said from the saved state
        if code is not None:
            sys.stdout.flush()
            sys.exit(code)
    except BrokenPipeError:  # as click's path: a closed pipe ends the output quietly
        sys.exit(0)
    cli.main(args)


if __name__ == "__main__":
    main()
