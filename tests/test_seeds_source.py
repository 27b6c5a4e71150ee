"""Seed pairs recalled beside the files: cached, regenerated on change, never breaking recall."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

import wrenmem.schema.manifest
from tests.conftest import settle, write_pair
from wrenmem.pairs.seeds import extra_pairs
from wrenmem.settings import load_settings


def test_seed_pairs_of_the_example(example_project: Path) -> None:
    settings = load_settings(example_project)
    seeds = extra_pairs(settings, exclude_questions=[])
    assert seeds and all(p.source == "seed" and p.path.startswith("seed:") for p in seeds)
    orders = next(p for p in seeds if p.path == "seed:model/orders/sum/amount")
    assert orders.sql == "SELECT SUM(amount) AS total_amount FROM orders"
    assert orders.dialect == "postgres" and orders.datasource == "postgres"
    assert orders.tags == ("seed", "sum")


def test_cached_by_stat_then_regenerated_on_change(example_project: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    settings = load_settings(example_project)
    manifest = settings.manifest_path
    settle(monkeypatch)  # out of the racy window: its change time cannot be aged
    first = extra_pairs(settings, exclude_questions=[])
    calls = []
    real = wrenmem.schema.manifest.load_manifest
    monkeypatch.setattr(wrenmem.schema.manifest, "load_manifest",
                        lambda p, **kw: calls.append(p) or real(p, **kw))
    assert extra_pairs(settings, exclude_questions=[]) == first
    assert calls == []  # unchanged file: not even parsed
    doc = json.loads(manifest.read_text())
    doc["models"] = [m for m in doc["models"] if m["name"] != "payments"]
    doc["relationships"] = [r for r in doc["relationships"] if "payments" not in r["models"]]
    manifest.write_text(json.dumps(doc))
    second = extra_pairs(settings, exclude_questions=[])
    assert calls and not any("payments" in p.path for p in second)
    assert len(second) < len(first)


def test_no_manifest_and_broken_manifest(project: Path, caplog: pytest.LogCaptureFixture
                                         ) -> None:
    settings = load_settings(project)
    assert extra_pairs(settings) == []
    (project / "target").mkdir()
    (project / "target" / "mdl.json").write_text('{"models": 7}')
    with caplog.at_level(logging.WARNING):
        assert extra_pairs(settings) == []
    assert "'models' must be a list" in caplog.text


def test_questions_with_files_are_not_recalled_twice(example_project: Path) -> None:
    settings = load_settings(example_project)
    write_pair(example_project, "mine.md", "List all orders", "SELECT id FROM orders")
    questions = [p.nl for p in extra_pairs(settings)]
    assert "List all orders" not in questions
    assert "List all customers" in questions


def test_grep_recall_returns_seeds(example_project: Path, cli) -> None:
    result = cli("recall", "-q", "show payments where method is credit card", "--json",
                 "-b", "grep", root=example_project)
    assert result.exit_code == 0, result.output
    hits = json.loads(result.output)[0]["hits"]
    assert hits[0]["path"] == "seed:model/payments/filter/method"
    assert hits[0]["source"] == "seed"


def test_seeds_false_turns_seeds_off(example_project: Path, cli, monkeypatch) -> None:
    (example_project / "wrenmem.toml").write_text("seeds = false\n")
    settings = load_settings(example_project)
    assert settings.seeds is False and extra_pairs(settings, exclude_questions=[]) == []
    result = cli("recall", "-q", "show payments where method is credit card", "--json",
                 "-b", "grep", root=example_project)
    hits = json.loads(result.output)[0]["hits"]
    assert hits and all(h["source"] != "seed" for h in hits)
    monkeypatch.setenv("WRENMEM_SEEDS", "true")  # the environment overrides the file
    assert extra_pairs(load_settings(example_project), exclude_questions=[])
    monkeypatch.setenv("WRENMEM_SEEDS", "perhaps")
    with pytest.raises(Exception, match="expected true or false"):
        load_settings(example_project)
