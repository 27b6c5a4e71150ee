"""The no-op check of a sync, on its own: whether the pair files are exactly as the state
mirror records them, found by one stat walk with no lock, no LanceDB, no model and none of
the sync's imports (:mod:`wrenmem.index.sync` is the full path; it makes the same check
first). A caller that must not pay for the sync's imports may ask it first."""

from __future__ import annotations

from wrenmem.errors import PairError
from wrenmem.index.report import SyncReport
from wrenmem.index.state import IndexState, record_walk, stat_delta
from wrenmem.settings import Settings


def noop_report(settings: Settings, model_id: str) -> SyncReport | None:
    """The report of a sync that finds nothing to do (the very report
    :func:`wrenmem.index.sync.sync_pairs` returns then), when every pair file's stat and
    every seed is as the mirror of the ``model_id`` index records; None when a file may
    have changed or the mirror cannot vouch (missing, another target, being rewritten):
    the full sync then decides."""
    delta = stat_delta(settings, model_id)
    if delta is None or not delta.empty or delta.partial:
        return None
    if not delta.quick and delta.walk is not None:  # the next no-op compares bytes
        record_walk(settings, delta.state, delta.walk)
    return report_from_state(delta.state, model_id)


def report_from_state(state: IndexState, model_id: str) -> SyncReport:
    """The no-op report of the index the mirror ``state`` describes."""
    errors = tuple(PairError(p, reason, line) for p, reason, line in state.errors)
    return SyncReport(unchanged=state.ids, errors=errors, noop=True, model_id=model_id,
                      rows=state.rows)
