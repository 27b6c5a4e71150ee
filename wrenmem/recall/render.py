"""What ``recall`` prints: the text for people, and Wren's JSON row shape for old parsers.

No click here: the CLI's fast path to the daemon prints the same text without loading the
command tree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from wrenmem.recall.hits import Hit, RecallResult


def render_text(results: Sequence[RecallResult]) -> str:
    """The human-readable listing (ends with a newline)."""
    lines: list[str] = []
    for n, result in enumerate(results):
        if n:
            lines.append("")
        lines.append(f"# {result.query}  [{result.backend}]")
        if not result.hits:
            lines.append("  (no match)")
        for rank, hit in enumerate(result.hits, 1):
            lines.append(f"{rank}. {hit.question}")
            lines.append(f"   {hit.path}  score={hit.score:g}  source={hit.source}"
                         + ("  verified" if hit.verified else "")
                         + (f"  verification claimed by {hit.claimed_by}, not committed"
                            if hit.claimed_by else "")
                         + ("  WRITES: allow-writes, outside the read-only rule"
                            if hit.allows_writes else ""))
            lines.extend(f"   also: {phrasing}" for phrasing in hit.also)
            lines.extend(f"     {line}" for line in hit.sql.splitlines())
    return "\n".join(lines) + "\n"


def wren_row(hit: Hit, created_at: str | None = None) -> dict[str, Any]:
    """One hit in the shape of a row of ``wren memory recall -o json``: the LanceDB columns
    (``text``, ``nl_query``, ``sql_query``, ``datasource``, ``created_at``, ``tags``,
    ``_distance``) plus the ``path`` and ``score`` its grep backend gives. ``_distance`` is
    ``1 - score`` (lower is better, as in LanceDB); ``tags`` is one comma-joined string."""
    return {"text": hit.question, "nl_query": hit.question, "sql_query": hit.sql,
            "datasource": hit.datasource or "", "created_at": created_at,
            "tags": ",".join(hit.tags), "path": hit.path, "score": hit.score,
            "_distance": round(max(0.0, 1.0 - hit.score), 6)}


def wren_rows(results: Sequence[RecallResult], created: Mapping[str, str | None]
              ) -> list[Any]:
    """Rows for one question (Wren's recall takes one); a list of row lists for several."""
    per_question = [[wren_row(h, created.get(h.path)) for h in r.hits] for r in results]
    return per_question[0] if len(per_question) == 1 else per_question
