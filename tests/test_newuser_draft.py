"""`recall --sql` as docs/commands.md describes it, on the bundled example with the real model:
a draft that is close but not exactly a stored SQL keeps the right pair first, and its score
stays a probability (the draft model is fitted over right, nearly right and wrong drafts;
before round 12 it was fitted with exact drafts only and such a draft took the score from
0.7 to under 0.01)."""

from __future__ import annotations

from pathlib import Path

from wrenmem import Memory

QUESTION = "What was our revenue per month?"
RIGHT = "knowledge/sql/sales/monthly-revenue-in-2024.md"  # its English twin, as asked
# The monthly revenue pair without its status filter and date range: a plausible first try.
CLOSE_DRAFT = ("SELECT DATE_TRUNC('month', ordered_at) AS month, SUM(amount) AS revenue "
               "FROM orders GROUP BY 1")


def test_a_close_draft_keeps_the_order_and_a_meaningful_score(indexed_example: Path) -> None:
    memory = Memory(indexed_example, backend="hybrid")
    alone = memory.recall(QUESTION, k=3)[0]
    drafted = memory.recall(QUESTION, k=3, sql=CLOSE_DRAFT)[0]
    assert alone.path == drafted.path == RIGHT
    assert alone.score > 0.5                 # the question alone: a confident answer
    # a near miss lowers the score (the draft disagrees with the pair) without wiping it out
    assert 0.2 < drafted.score < alone.score, drafted.score
    assert [h.path for h in memory.recall(QUESTION, k=3, sql=CLOSE_DRAFT, min_score=0.2)] \
        == [RIGHT]
