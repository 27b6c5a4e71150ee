"""``python -m wrenmem.watch.fitter ROOT``: the recall fit a sync left owed, made in a
process of its own (:mod:`wrenmem.index.fitjob` starts it, detached and niced).

It resolves the settings the sync recorded in the mark, waits for the fit lock (another
fitter may be at work), fits (:meth:`wrenmem.api.Memory.fit_recall`'s fit, one-shot: the
model let go once the probes are embedded; it writes the fit atomically and clears the
mark), and exits: 0, or 1 when the fit failed (the reason is written into the mark, which
stays for the next sync to try again)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

from wrenmem.api import Memory
from wrenmem.errors import WrenmemError
from wrenmem.fs.statedir import STATE_DIR
from wrenmem.index import fitjob
from wrenmem.recall import adapt
from wrenmem.settings import Settings

NICE = 10  # below the user's commands: the fit is not waited for


def settings_from(payload: dict[str, Any]) -> Settings:
    """The :class:`Settings` that :func:`wrenmem.recall.daemon_client.settings_payload` gave
    as JSON (TypeError/ValueError if it is not such a payload)."""
    known = {f.name for f in dataclasses.fields(Settings) if f.compare}
    values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v
                              for k, v in payload.items() if k in known and k != "root"}
    return Settings(root=Path(payload["root"]), **values)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m wrenmem.watch.fitter ROOT", file=sys.stderr)
        return 2
    with contextlib.suppress(OSError):
        os.nice(NICE)
    owed = fitjob.read_owed(Path(args[0]).resolve() / STATE_DIR)
    if owed is None:  # fitted by another meanwhile
        return 0
    try:
        settings = settings_from(owed["settings"])
    except (KeyError, TypeError, ValueError):
        return 1
    try:
        with fitjob.fit_lock(settings, fitjob.LOCK_WAIT):
            memory = Memory.from_settings(settings)  # (as Memory.fit_recall, one-shot)
            adapt.fit_project(settings, lambda: memory.recaller, None, one_shot=True,
                              indexed=not memory.grep_only)
    except (WrenmemError, OSError, ValueError) as e:
        fitjob.note_failure(settings, owed["nonce"], str(e))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
