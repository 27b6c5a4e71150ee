"""What a recall fit (:mod:`wrenmem.recall.adapt`) says: ``status``'s one line and ``eval``'s
lines, and whether a detached fit is still being made (:mod:`wrenmem.index.fitjob`)."""

from __future__ import annotations

from typing import Any

from wrenmem.recall import model
from wrenmem.recall.adapt import CANDIDATES, FITTED_TASKS, MIN_PROBES, TASK_NAMES


def summary(data: dict[str, Any] | None) -> str:
    """One line of what was fitted (``status``, ``eval``): the ranking chosen, on how many
    probes, and its gain over the prior on each task with a 95 % interval."""
    if not data:
        return "none yet (made by `wrenmem sync` or `wrenmem eval`)"
    probes = data.get("probes", {})
    asked = (f"{probes.get('answered', 0)} answered-before and {probes.get('new', 0)} "
             "new-question probes"
             + (f", {probes['siblings']} decisive-word sibling ones" if probes.get("siblings")
                else ""))
    if data.get("reason"):
        return f"prior ({asked}; {data['reason']})"
    unchecked = [t for t in data.get("unchecked") or () if t in TASK_NAMES]
    if unchecked:  # a fit on the other tasks (their loss checked from MIN_CHECKED)
        asked += (" (" + " and ".join(TASK_NAMES[t] for t in unchecked)
                  + f": fewer than {MIN_PROBES}, not fitted)")
    chosen = data.get("chosen", "prior")

    def gains_of(task_gain: dict[str, Any]) -> str:
        return "; ".join(f"{TASK_NAMES.get(t, t)} {g[0]:+.3f} ({g[1]:+.3f} to {g[2]:+.3f})"
                         for t, g in task_gain.items())

    if chosen == "prior":
        cands = data.get("candidates") or {}
        other = max((c for c in CANDIDATES[1:] if c in cands),
                    key=lambda c: cands[c].get("mean", 0.0), default=None)
        if other is None:
            return f"prior on {asked}"
        return (f"prior kept on {asked}: the best other ranking, {other}, would change "
                f"R@1 by {gains_of((data.get('candidate_gain') or {}).get(other, {}))} "
                f"(95 % intervals), short of the gain asked without losing a task")
    gains = gains_of(data.get("task_gain") or {})
    tilt = ", ".join(f"{name} {w:.2f}" for name, w in zip(model.TILT_TERMS,
                                                           data.get("tilt", []), strict=False)
                     if w)
    unused = ("; not used by recall (recall_fit = false)"
              if data.get("applied") is False and chosen != "prior" else "")
    form = data.get("form")
    said = (f"; the shipped SQL-form evidence {form}" if chosen == "adapted"
            and form in ("halved", "off") else "")
    return (f"{chosen} on {asked}; R@1 gained over the shipped model: {gains or 'none'}"
            + (f" (weights added: {tilt})" if tilt else "") + said + unused)


def render_fit(data: dict[str, Any]) -> list[str]:
    """``eval``'s lines on the fit: the summary, then each ranking compared."""
    lines = [f"recall fit: {summary(data)}"]
    cands = data.get("candidates") or {}
    if cands:
        tasks = [t for t in FITTED_TASKS if any(t in m for m in cands.values())]
        lines.append(f"  compared on these pairs' own probes (R@1 {'/'.join(tasks)}; adapted: "
                     "out of fold): "
                     + ", ".join(f"{name} " + "/".join(f"{m.get(t, 0.0):.3f}" for t in tasks)
                                 for name, m in cands.items())
                     + ("; hybrid:learned above uses the chosen one" if data.get("applied")
                        else "; hybrid:learned above is the shipped model (recall_fit = "
                             "false)"))
    return lines


def pending_note(owed: dict[str, Any] | None, fitted: bool) -> str:
    """What ``status`` adds while a detached fit is owed or being made (``fitted``: there
    is an earlier fit, which recall uses meanwhile)."""
    meanwhile = "this one" if fitted else "the shipped model"
    failed = (owed or {}).get("failed")
    if failed:
        return (f"; the next fit failed ({failed}): recall uses {meanwhile} until a sync "
                "starts the fitter again")
    return (f"; the next fit is being made by a detached fitter (recall uses {meanwhile} "
            "until then)")
