"""The data of ``wrenmem status``: backend, embedder, counts and freshness of the index.

A library function (no click) so that the warm daemon can answer ``status`` with exactly
what the command computes in-process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from wrenmem.index import fitjob
from wrenmem.index.drift import check_drift
from wrenmem.knowledge.files import load_knowledge
from wrenmem.knowledge.table import knowledge_drift
from wrenmem.lazy import lazy
from wrenmem.recall.backends import choose_backend
from wrenmem.schema.table import schema_drift
from wrenmem.settings import Settings
from wrenmem.storage.lance import index_unavailable

if TYPE_CHECKING:
    from wrenmem.index.team import reader
else:  # imported on first use (wrenmem/lazy.py)
    reader = lazy("wrenmem.index.team.reader")

if TYPE_CHECKING:
    from wrenmem.embed.embedders import Embedder


def status_data(settings: Settings, embedder: Embedder | None = None) -> dict[str, Any]:
    """Everything ``wrenmem status`` shows, with stable keys (its ``--json`` output);
    ``embedder``: instead of the ``embedder`` setting's."""

    backend = choose_backend(settings)
    unavailable = index_unavailable(settings)
    data: dict[str, Any] = {
        "backend": backend,
        "backend_setting": settings.backend,
        "embedder_setting": settings.embedder,
        "index": settings.index_uri,
        "role": settings.role,
        "index_available": unavailable is None,
        "index_unavailable_reason": unavailable,
    }
    known = load_knowledge(settings)
    data["knowledge"] = {"files": len(known.files), "entries": len(known.entries),
                         "rules": len(known.rules), "terms": len(known.terms),
                         "unreadable": len(known.errors), "fresh": True, "reason": ""}
    if settings.backend == "grep" and unavailable is None:
        unavailable = "backend is grep: the pair files are the index"
        data["index_unavailable_reason"] = unavailable
    if unavailable is None and settings.is_reader:
        view = reader.reader_view(settings)
        data.update({"version": view.version,
                     "built_from": view.built_from.to_dict() if view.built_from else None,
                     "checkout": view.here.to_dict(), "reader_drift": view.counts(),
                     "reader_note": view.note()})
    if unavailable is None:
        drift = check_drift(settings, embedder)
        schema = schema_drift(settings, drift.model_id)
        knowledge = knowledge_drift(settings, drift.model_id)
        data["knowledge"].update(fresh=knowledge.fresh, reason=knowledge.reason)
        data.update({
            "embedder": drift.model_id,
            "built_by": drift.built_by,
            "pairs": drift.pairs,
            "seeds": drift.seeds,
            "rows": drift.rows,
            "bad_files": len(drift.errors),
            "unreadable": [{"path": e.path, "line": e.line, "reason": e.reason}
                           for e in drift.errors],
            "fresh": drift.fresh and schema.fresh and knowledge.fresh,
            "schema": schema.to_dict(),
            "index_missing": drift.index_missing,
            "rebuild_needed": drift.rebuild_needed,
            "problems": list(drift.problems),
            "owner": drift.owner,
            "drift": {"added": len(drift.plan.added), "changed": len(drift.plan.changed),
                      "removed": len(drift.plan.removed),
                      "renamed": len(drift.plan.renamed)},
        })
        from wrenmem.recall import adapt, fitreport

        # what the last sync (or eval) fitted hybrid recall to (None: none yet), whether
        # recall uses it, and whether a detached fitter is making the next one
        fit = adapt.read(settings)
        pending = fitjob.pending(settings)
        if fit is not None or settings.recall_fit or pending:
            data["recall_fit"] = fit and {**fit, "applied": settings.recall_fit}
            data["recall_fit_pending"] = pending
            data["recall_fit_summary"] = fitreport.summary(data["recall_fit"])
            if pending:
                data["recall_fit_summary"] += fitreport.pending_note(
                    fitjob.read_owed(settings.state_dir), fit is not None)
    return data
