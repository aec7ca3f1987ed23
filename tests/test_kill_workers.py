"""``kvconf mutants --jobs N``: the kill matrix in the kit's worker processes. The same verdict per
mutant (killer case, finding signature, examples) for any number of workers and whatever order
units finish in; a mutant whose engine crashes or hangs is killed by that and the matrix goes
on (FAULT-3)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.cli import app
from kvconf.conformance.mutants import Mutant, all_mutants
from kvconf.conformance.mutants import kill as kill_mod
from kvconf.conformance.mutants.kill import _KillCampaign, _Verdict, run_mutants
from kvconf.conformance.reporting.report import CaseResult, Status, UnitResult
from kvconf.conformance.running.cases import Case
from kvconf.conformance.running.profiles import Budget, get_profile, parse_budget
from kvconf.conformance.running.units import EngineUnit
from kvconf.reference import PrefixCache

CI = get_profile("ci")
VERDICT = ("killed", "case", "oracle", "behaviours", "signature", "examples", "trace", "message")


def _matrix(tmp_path: Path, jobs: int, names: list[str], **kw) -> dict[str, dict]:
    report = tmp_path / f"jobs{jobs}" / "kill.json"
    matrix = run_mutants(seed_value=0, profile=CI, budget=kw.pop("budget", parse_budget(None, CI)),
                         report_path=report, names=names, jobs=jobs, **kw)
    data = json.loads(report.read_text())  # the report as written, atomically, at the end
    assert [m["id"] for m in data["mutants"]] == [m.id for m in matrix.mutants]
    assert data["run_info"]["jobs"] == jobs
    for m in data["mutants"]:
        if m["trace"]:  # the killer's trace, under the mutant's folder
            assert (report.parent / m["trace"]).is_file(), m
    return {m["id"]: m for m in data["mutants"]}


@pytest.mark.behaviours("DET-1")
def test_the_kill_matrix_is_the_same_for_any_number_of_workers(tmp_path: Path):
    """Fuzz only, so each verdict comes from generated traces cut into units that two workers
    share; the mutants are listed in their order, each with the same killer and finding."""
    # Each is found past the first unit of its fuzz case at --profile ci (3 units of 20): a
    # cache-level one and two of the scheduler's swarm (`kvconf mutants --fuzz-only` lists each
    # killer's examples; pick others if the generators change and these die sooner).
    names = ["DropsLeafOnUnlock", "NoWorkingFallback", "SharedResumeSource"]
    got = {jobs: _matrix(tmp_path, jobs, names, fuzz_only=True) for jobs in (0, 1, 2)}
    assert list(got[2]) == [m.name for m in all_mutants() if m.name in names]
    for name in names:
        want = {k: got[0][name][k] for k in VERDICT}
        assert want["killed"] and want["signature"] and want["examples"] > 20, want
        for jobs in (1, 2):
            assert {k: got[jobs][name][k] for k in VERDICT} == want, (name, jobs)


def _result(case: str, index: int, of: int, status: Status, message: str = "") -> CaseResult:
    return CaseResult(case=case, status=status, behaviours=["PIN-2"], message=message,
                      oracle="pin" if status is Status.FAIL else None, duration_s=0.0,
                      examples=5, units=[UnitResult(index=index, of=of, status=status,
                                                    examples=5)])


def test_a_verdict_reads_units_in_order_whatever_order_they_finish():
    """Units finish in any order; the verdict is the first unit in suite order that kills, a
    unit past a known killer is not wanted, and one ended in ERROR ends its case alone."""
    m = next(iter(all_mutants()))
    units = ([EngineUnit("scenario", 0, 1, Budget(examples=1), m.name)]
             + [EngineUnit("fuzz-a", k, 3, Budget(examples=25), m.name) for k in range(3)]
             + [EngineUnit("fuzz-b", k, 2, Budget(examples=25), m.name) for k in range(2)])
    cases = {"scenario": Case("scenario", (), frozenset(), lambda ctx: None),
             "fuzz-a": Case("fuzz-a", (), frozenset(), lambda ctx: None, fuzz=True, doc="a"),
             "fuzz-b": Case("fuzz-b", (), frozenset(), lambda ctx: None, fuzz=True, doc="b")}
    seen: list[tuple[str, int | None]] = []
    verdict = _Verdict(m, units)
    campaign = _KillCampaign({m.name: verdict}, cases,
                             lambda v, at: seen.append((v.mutant.name, at)), None, None)
    campaign.add(units[5], _result("fuzz-b", 1, 2, Status.FAIL, "later"))  # finishes first
    assert not seen and campaign.wanted(units[5])  # still wanted: it may be the killer
    campaign.add(units[2], _result("fuzz-a", 1, 3, Status.ERROR))  # ends fuzz-a alone
    assert not campaign.wanted(units[3])  # past the ERROR in its case
    assert campaign.wanted(units[4])  # fuzz-b's first unit: before the known killer
    campaign.add(units[4], _result("fuzz-b", 0, 2, Status.FAIL, "sooner"))
    assert not campaign.wanted(units[5]) and not seen  # the scenario and fuzz-a[0] not in
    campaign.add(units[1], _result("fuzz-a", 0, 3, Status.PASS))
    campaign.add(units[0], _result("scenario", 0, 1, Status.PASS))
    assert seen == [(m.name, 4)]
    killer = campaign.result(verdict, 4)
    assert killer.message == "sooner" and killer.examples == 5  # fuzz-b's units up to it
    campaign.add(units[5], _result("fuzz-b", 1, 2, Status.FAIL, "later"))  # decided: ignored
    assert seen == [(m.name, 4)]


def test_a_mutant_every_unit_passes_is_alive_once_all_are_in():
    m = next(iter(all_mutants()))
    units = [EngineUnit("fuzz-a", k, 2, Budget(examples=25), m.name) for k in range(2)]
    cases = {"fuzz-a": Case("fuzz-a", (), frozenset(), lambda ctx: None, fuzz=True, doc="a")}
    seen: list = []
    campaign = _KillCampaign({m.name: _Verdict(m, units)}, cases,
                             lambda v, at: seen.append(at), None, None)
    campaign.add(units[1], _result("fuzz-a", 1, 2, Status.PASS))
    assert seen == []
    campaign.add(units[0], _result("fuzz-a", 0, 2, Status.PASS))
    assert seen == [None]


@dataclass(frozen=True, slots=True)
class _EngineMutant(Mutant):
    """A mutant whose engine is a factory of this folder (``faulty_engine``), which a worker
    opens by name as it opens the kit's mutants."""

    target: str = ""

    @property
    def engine(self) -> str:
        return self.target


class _Faulty(PrefixCache):
    """FAULT-3 / E-3: the faulty engine's defect (the parent only asks its features)."""


@pytest.mark.behaviours("FAULT-3")
def test_a_mutant_whose_engine_crashes_or_hangs_is_killed_and_the_matrix_goes_on(
        tmp_path: Path, monkeypatch):
    evicts = next(m for m in all_mutants() if m.name == "EvictsPinned")
    faulty = [_EngineMutant(name, "cache", _Faulty, ("FAULT-3", "E-3"), "faulty",
                            f"faulty_engine:{name}") for name in ("Aborts", "Hangs")]
    monkeypatch.setattr(kill_mod, "all_mutants", lambda: [*faulty, evicts])
    got = _matrix(tmp_path, 1, [], call_timeout=5.0, budget=Budget(examples=5))
    assert list(got) == ["Aborts", "Hangs", "EvictsPinned"]  # each reported, in order
    aborts, hangs = got["Aborts"], got["Hangs"]
    assert aborts["killed"] and aborts["oracle"] == "worker"
    assert aborts["signature"].startswith("worker/FAULT-3/") and "SIGABRT" in aborts["signature"]
    assert "SIGABRT" in aborts["message"]
    assert hangs["killed"] and hangs["oracle"] == "worker" and "did not answer" in hangs["message"]
    assert got["EvictsPinned"]["killed"] and got["EvictsPinned"]["oracle"] == "eviction"


def test_bad_jobs_is_a_usage_error(tmp_path: Path):
    res = CliRunner().invoke(app, ["mutants", "--jobs", "-1", "--mutant", "EvictsPinned",
                                   "--report", str(tmp_path / "k.json")])
    assert res.exit_code == 2 and "--jobs -1" in res.output


def test_a_cancelled_unit_stops_at_its_next_tick_and_the_next_unit_runs():
    """A worker's SIGUSR2 (``progress.cancel``) stops the running fuzz unit at its next tick,
    never in the middle of a step; a request that came after the unit ended is forgotten when
    the next one starts (``cancel(wanted=True)``)."""
    from kvconf.conformance.running import progress

    meter = progress.Meter("fuzz-cache", "fuzz-cache[1/3]", Budget(examples=25))
    meter.tick(1, 10)
    progress.cancel()
    try:
        with pytest.raises(progress.Cancelled):
            meter.tick(2, 20)
        with pytest.raises(progress.Cancelled):
            meter.shrinking(3)
        assert not issubclass(progress.Cancelled, Exception)  # no engine-error handler takes it
    finally:
        progress.cancel(wanted=True)
    meter.tick(3, 30)  # the next unit runs
