"""What the MCP server keeps warm answers exactly what a fresh CLI call would."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import write_pair
from wrenmem import Memory
from wrenmem.mcp.tools import Tools
from wrenmem.recall.bm25f import GrepBackend, WarmGrep
from wrenmem.recall.hits import Filters
from wrenmem.settings import load_settings
from wrenmem.watch.freshness import Freshness

QUESTIONS = ["What was our revenue per month?", "每个门店的销售额是多少？", "top customers",
             "refunds", "zzz nothing matches"]
FILTERS = [Filters(), Filters(tags=("revenue",)), Filters(source="seed"),
           Filters(datasource="nope")]


def test_warm_grep_answers_what_grep_answers(example_project: Path) -> None:
    settings = load_settings(example_project)
    warm = WarmGrep(settings)
    for filters in FILTERS:
        for _twice in range(2):  # the second time from the kept index
            assert (warm.search(QUESTIONS, 5, filters)
                    == GrepBackend(settings).search(QUESTIONS, 5, filters))


def test_tools_renew_grep_after_a_change_only(example_project: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    memory = Memory(example_project, backend="grep")
    fresh = Freshness(memory.settings)
    memory.keep_warm(fresh)
    tools = Tools(memory)
    loads = []
    original = GrepBackend._load
    monkeypatch.setattr(GrepBackend, "_load", lambda self: loads.append(1) or original(self))
    try:
        tools.recall_queries("revenue per month", 3)
        tools.recall_queries("top customers", 3)
        assert len(loads) == 1  # read once, then kept
        write_pair(example_project, "zebra.md", "How many zebras are in the zoo?",
                   "SELECT COUNT(*) FROM zebras")
        deadline = time.monotonic() + 10
        while True:
            out = tools.recall_queries("zebras in the zoo", 1)
            if out["pairs"] and out["pairs"][0]["path"] == "knowledge/sql/zebra.md":
                break
            assert time.monotonic() < deadline, "the new pair was never recalled"
            time.sleep(0.05)
        assert len(loads) == 2
        shutil.rmtree(example_project / "knowledge" / "sql" / "customers")
        deadline = time.monotonic() + 10
        while any(p["path"].startswith("knowledge/sql/customers/")
                  for p in tools.recall_queries("customers", 10)["pairs"]):
            assert time.monotonic() < deadline, "deleted pairs are still recalled"
            time.sleep(0.05)
    finally:
        fresh.close()
