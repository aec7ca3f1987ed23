"""The conformance cases as pytest items: ``pytest --kvconf-engine NAME_OR_module:factory``.

For an engine's own test suite: one item per case, in suite order, judged exactly as ``kvconf run``
judges it (same seed, same traces, same report at ``--kvconf-report``). The cases run in the kit's
worker processes (``kvconf.conformance.running.pool``), so an engine that crashes or hangs fails its
item as CRASH or TIMEOUT and pytest goes on. A case the engine cannot run is skipped
(NOT_SUPPORTED), and so is one the config is too small for (NOT_APPLICABLE), each with its reason;
with ``--kvconf-expect`` a known failure is an xfail with its reason, and a known failure that now
passes fails its item as an improvement, as the kit counts it. Without ``--kvconf-engine`` the
plugin adds nothing."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from kvconf.conformance.errors import KitError

DEFAULT_REPORT = "kvconf-report/report.json"
DEFAULT_EXAMPLES_DB = ".kvconf/examples"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kvconf", "kvconf conformance cases (kvconf run as pytest items)")
    group.addoption("--kvconf-engine", default=None, metavar="NAME",
                    help="Engine to judge: a name (kvconf engines) or module:factory; without "
                         "it the plugin adds nothing.")
    group.addoption("--kvconf-profile", default=None,
                    help="ci, default or nightly (default: $KVCONF_PROFILE or default).")
    group.addoption("--kvconf-seed", type=int, default=0, help="Seed of the generators.")
    group.addoption("--kvconf-budget", default=None,
                    help="Per fuzz case: a number of generated traces (200) or seconds (30s).")
    group.addoption("--kvconf-config", action="append", default=[], metavar="KEY=VALUE",
                    help="Engine config override (repeatable).")
    group.addoption("--kvconf-case", action="append", default=[], metavar="CASE",
                    help="Only this case (repeatable).")
    group.addoption("--kvconf-expect", default=None, metavar="FILE",
                    help="Expectation file: known failures become xfail with their reason.")
    group.addoption("--kvconf-examples-db", default=DEFAULT_EXAMPLES_DB,
                    help="Hypothesis example database: a folder, module:attr, or none.")
    group.addoption("--kvconf-jobs", type=int, default=1,
                    help="Worker processes; 0 runs the engine in pytest's own process (no "
                         "crash or hang isolation: for debuggers).")
    group.addoption("--kvconf-worker-memory", default=None, metavar="SIZE",
                    help="Memory each worker may hold (4GiB, 700MiB; 0: no limit; default "
                         "4GiB); past it the engine's memory is a finding (FAULT-5).")
    group.addoption("--kvconf-call-timeout", type=float, default=60.0,
                    help="Seconds a worker may stay silent before its case is TIMEOUT.")
    group.addoption("--kvconf-report", default=DEFAULT_REPORT, metavar="PATH",
                    help="Where to write the JSON report (failing traces beside it).")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("kvconf_engine", None) is None:
        return
    if distributed(config):
        raise pytest.UsageError(
            "kvconf: the plugin does not support pytest-xdist (-n/--dist): its cases share one "
            "run and one report; run them without -n and give --kvconf-jobs N for parallel "
            "workers")
    try:
        suite = KvconfSuite(config)
    except KitError as e:
        raise pytest.UsageError(f"kvconf: {e}") from None
    config.addinivalue_line("markers", "kvconf: a kvconf conformance case (pytest_plugin)")
    config.pluginmanager.register(suite, "kvconf-suite")


def distributed(config: pytest.Config) -> bool:
    """Whether pytest-xdist spreads this session over processes: each would open the engine,
    run a share of the cases and write the report alone, each over the others' (a report of
    half the cases), so the plugin refuses it."""
    if hasattr(config, "workerinput"):  # an xdist worker
        return True
    dist = config.getoption("dist", "no")
    return dist not in (None, "no") and bool(config.getoption("tx", None))


class CaseFailed(Exception):
    """A case that did not end as it should; its text is the item's failure report."""


class KvconfSuite:
    """The session's run: options parsed once, the engine opened at the first item (workers),
    every case's result settled into one report, written at the end."""

    def __init__(self, config: pytest.Config) -> None:
        from kvconf.conformance.adapters import check_engine
        from kvconf.conformance.engine.config import EngineConfig, parse_overrides
        from kvconf.conformance.reporting.expectations import load_expectations
        from kvconf.conformance.running.bounds import parse_memory
        from kvconf.conformance.running.profiles import get_profile, parse_budget
        from kvconf.conformance.running.runner import all_cases, select_cases

        opt = config.getoption
        self.engine: str = opt("kvconf_engine")
        check_engine(self.engine)
        self.profile = get_profile(opt("kvconf_profile"))
        self.budget = parse_budget(opt("kvconf_budget"), self.profile)
        self.seed: int = opt("kvconf_seed")
        self.config = parse_overrides(EngineConfig(), opt("kvconf_config"))
        self.cases = select_cases(opt("kvconf_case") or None)
        self.jobs: int = opt("kvconf_jobs")
        if self.jobs < 0:
            raise KitError(f"--kvconf-jobs {self.jobs}: must be 0 (this process) or more")
        self.call_timeout: float = opt("kvconf_call_timeout")
        self.worker_memory = parse_memory(opt("kvconf_worker_memory"),
                                          "--kvconf-worker-memory")
        self.database: str = opt("kvconf_examples_db")
        self.report_path = Path(opt("kvconf_report"))
        self.expect_path = Path(opt("kvconf_expect")) if opt("kvconf_expect") else None
        self.expectations = None
        if self.expect_path is not None:
            self.expectations = load_expectations(self.expect_path)
            if self.expectations.engine != self.engine:
                raise KitError(f"{self.expect_path}: engine: the file is for "
                               f"{self.expectations.engine}, the run is of {self.engine}")
            names = {c.name for c in all_cases()}
            for k in self.expectations.known:
                if k.case not in names:
                    raise KitError(f"{self.expect_path}: known case {k.case}: no such case")
        self.run = None  # _Run, once the first item starts
        self.failed_to_open: str | None = None

    # ------------------------------------------------------------------ pytest hooks
    @pytest.hookimpl(tryfirst=True)  # before -k / -m / --deselect see the items
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        parent = CaseCollector.from_parent(session, name="kvconf", nodeid="kvconf")
        ours = [CaseItem.from_parent(parent, name=c.name, case=c, suite=self)
                for c in self.cases]
        # Reported as collected, so pytest's "collected N items" counts them.
        session.ihook.pytest_collectreport(
            report=pytest.CollectReport(parent.nodeid, "passed", None, ours))
        items.extend(ours)

    def pytest_report_header(self, config: pytest.Config) -> str:
        return (f"kvconf: engine {self.engine}, seed {self.seed}, profile {self.profile.name}, "
                f"budget {self.budget}, {len(self.cases)} cases, report {self.report_path}")

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.run is None:
            return
        stopped = None
        if session.exitstatus == pytest.ExitCode.INTERRUPTED:  # Ctrl-C, or SIGTERM (_Run)
            stopped = [i.case.name for i in getattr(session, "items", [])
                       if isinstance(i, CaseItem)]
        self.run.close(self, stopped)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.run is not None:
            terminalreporter.write_line(f"kvconf: report {self.report_path}")

    # ------------------------------------------------------------------ cases
    def result(self, case):
        """Run ``case`` (opening the engine first, once) and return its CaseResult."""
        if self.failed_to_open is not None:
            raise CaseFailed(f"the engine could not be opened: {self.failed_to_open}")
        if self.run is None:
            try:
                self.run = _Run(self)
            except KitError as e:
                self.failed_to_open = str(e)
                raise CaseFailed(f"the engine could not be opened: {e}") from None
        return self.run.case(case)

    def replay_command(self, trace: str) -> str:
        path = self.report_path.parent / trace
        return f"kvconf replay {shlex.quote(str(path))} --engine {shlex.quote(self.engine)}"


class _Run:
    """The kit's side of one run, as ``run_suite`` (``kvconf.conformance.running.runner``) holds
    it, case by case."""

    def __init__(self, suite: KvconfSuite) -> None:
        from kvconf.conformance.running.examples_db import open_database
        from kvconf.conformance.running.runner import Campaign, open_engine, start_report, unjudged
        from kvconf.conformance.running.shrink import reset_interrupted
        from kvconf.conformance.running.units import plan

        reset_interrupted()
        out_dir = suite.report_path.parent
        self.out_dir = out_dir
        self.pool = None
        self.ctx = None
        if suite.jobs == 0:
            opened = open_engine(suite.engine, suite.config, seed_value=suite.seed,
                                 profile=suite.profile, budget=suite.budget,
                                 database=open_database(suite.database), out_dir=out_dir)
            self.ctx = opened.ctx
            features, version, unavailable = opened.ctx.features, opened.version, (
                opened.unavailable)
        else:
            from kvconf.conformance.running.pool import Pool, WorkerSpec

            spec = WorkerSpec(engine=suite.engine, config=suite.config, seed=suite.seed,
                              profile=suite.profile, budget=suite.budget,
                              database=suite.database, worker_memory=suite.worker_memory)
            most = len(plan(((c.name, c.fuzz) for c in suite.cases), suite.budget,
                            max(1, suite.jobs)))
            self.pool = Pool(spec, suite.jobs, suite.call_timeout, most)
            try:
                features, version, unavailable = self.pool.open()
            except BaseException:
                self.pool.close()
                raise
        report = start_report(suite.engine, suite.config, version, features,
                              seed_value=suite.seed, profile=suite.profile, budget=suite.budget,
                              jobs=suite.jobs, call_timeout=suite.call_timeout,
                              database=suite.database, worker_memory=suite.worker_memory)
        self.skipped = {c.name: r for c in suite.cases
                        if (r := unjudged(c, features, unavailable, suite.config)) is not None}
        self.units = plan(((c.name, c.fuzz and c.name not in self.skipped) for c in suite.cases),
                          suite.budget, max(1, suite.jobs))
        self.campaign = Campaign(suite.cases, self.units, report, suite.report_path)
        if self.pool is not None:
            self.pool.retire_beyond(sum(u.case not in self.skipped for u in self.units))
        self.sigterm = _sigterm_interrupts()

    def case(self, case):
        from kvconf.conformance.running.runner import run_unit

        units = [u for u in self.units if u.case == case.name]
        if case.name in self.skipped:
            for u in units:
                self.campaign.start(u)
                self.campaign.add(u, self.skipped[case.name])
        elif self.pool is not None:
            self.pool.run(units, self.campaign, self.out_dir)
        else:
            for u in units:
                if self.campaign.wanted(u):
                    self.campaign.start(u)
                    self.campaign.add(u, run_unit(self.ctx, case, u))
        return self.campaign.settled[case.name]

    def close(self, suite: KvconfSuite, stopped: list[str] | None = None) -> None:
        """The report as ``kvconf run`` writes it, with the cases pytest ran, and the workers
        stopped. ``stopped``: the session was interrupted, and these are the cases it was to
        run; those not settled are the report's ``not_run``, and it is marked interrupted."""
        import signal

        from kvconf.conformance.reporting.expectations import compare
        from kvconf.conformance.running.runner import now
        from kvconf.conformance.running.signals import hold_signals

        try:
            with hold_signals():  # another Ctrl-C must not cut the report or leave workers
                try:
                    report = self.campaign.report
                    if stopped is not None:
                        self.campaign.settle_found()
                        report.run_info.interrupted = True
                        report.run_info.not_run = [n for n in stopped
                                                   if n not in self.campaign.settled]
                    report.run_info.finished = now()
                    if suite.expectations is not None:
                        compare(report, suite.expectations, suite.expect_path, partial=True)
                    self.campaign.write()
                finally:
                    if self.pool is not None:
                        self.pool.close()
        finally:
            if self.sigterm is not None:  # SIGTERM as it was before the engine opened
                signal.signal(signal.SIGTERM, self.sigterm)


def _on_sigterm(signum, frame) -> None:
    raise KeyboardInterrupt


def _sigterm_interrupts():
    """While the engine's workers run, SIGTERM (what a CI runner sends at a time-out)
    interrupts the session as Ctrl-C does, so the report keeps the cases run so far, marked
    interrupted, and the workers are stopped. Only where SIGTERM still has its default action
    (a handler of the user's is left alone) and in the main thread; returns the handler to
    restore, or None."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return None
    if signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        return None
    return signal.signal(signal.SIGTERM, _on_sigterm)


class CaseCollector(pytest.Collector):
    """The parent of the case items (node id ``kvconf``); it collects nothing from files."""

    def collect(self) -> list[pytest.Item]:
        return []


class CaseItem(pytest.Item):
    """One conformance case, run through the kit's worker boundary."""

    def __init__(self, *, case, suite: KvconfSuite, **kw) -> None:
        super().__init__(**kw)
        self.case = case
        self.suite = suite
        self.add_marker(pytest.mark.kvconf)

    def runtest(self) -> None:
        from kvconf.conformance.reporting.expectations import Verdict, judge
        from kvconf.conformance.reporting.report import Status

        result = self.suite.result(self.case)
        if result.status is Status.NOT_APPLICABLE:  # the config decides it, whatever the file
            pytest.skip(f"NOT_APPLICABLE: {result.message}")
        exp = self.suite.expectations
        named = exp.signatures().get(self.case.name) if exp is not None else None
        if named is not None:
            self._judge_findings(result, named)
            return
        if exp is not None:
            known = exp.by_case().get(self.case.name)
            verdict = judge(result.status, known)
            if known is not None and verdict is Verdict.EXPECTED:
                pytest.xfail(f"{known.status.value} as expected: {known.reason} "
                             f"({known.reference})")
            if verdict is Verdict.IMPROVEMENT:
                raise CaseFailed(f"IMPROVEMENT: known to end {known.status.value} "
                                 f"({known.reason}), and now it passes; remove its entry from "
                                 f"{self.suite.expect_path}")
            if verdict is Verdict.REGRESSION and known is not None:
                raise CaseFailed(f"REGRESSION: known to end {known.status.value} "
                                 f"({known.reason})\n" + self.describe(result))
        if result.status is Status.PASS:
            return
        if result.status is Status.NOT_SUPPORTED:
            pytest.skip(f"NOT_SUPPORTED: {result.message}")
        raise CaseFailed(self.describe(result))

    def _judge_findings(self, result, named) -> None:
        """A case the file names by its findings' signatures, judged as ``kvconf run`` judges
        it: every finding named is an xfail, a finding not named a failure, and a pass an
        improvement unless every entry may pass."""
        from kvconf.conformance.reporting.expectations import Verdict, judge_findings
        from kvconf.conformance.reporting.report import Status

        found = [f.signature for f in result.findings]
        verdict, new = judge_findings(result.status, found, named)
        if verdict is Verdict.IMPROVEMENT:
            raise CaseFailed(f"IMPROVEMENT: known to make {', '.join(sorted(named))}, and now it "
                             f"passes; remove its entries from {self.suite.expect_path}")
        if verdict is Verdict.REGRESSION:
            what = (f"findings the file does not name: {', '.join(new)}" if new
                    else f"ended {result.status.value}, not a finding the file names")
            raise CaseFailed(f"REGRESSION: {what}\n" + self.describe(result))
        if result.status is Status.PASS:
            return  # every entry may pass: the search did not meet them this time
        pytest.xfail(f"{result.status.value} as expected: " + "; ".join(
            f"{sig}: {named[sig].reason} ({named[sig].reference})" for sig in found))

    def describe(self, result) -> str:
        """What broke: the status, the rules, the step, the engine's deed against the rule
        (the result's message), and the command that replays the saved trace."""
        step = f" at step {result.step}" if result.step is not None else ""
        lines = [f"{result.status.value}{step} [{result.oracle or '-'}] "
                 f"{', '.join(result.behaviours)}", result.message]
        if result.trace:
            lines.append(f"trace: {self.suite.report_path.parent / result.trace}")
            lines.append(f"replay: {self.suite.replay_command(result.trace)}")
        for part in ("traceback", "output"):
            text = getattr(result, part, None)
            if text:
                lines += [f"{part}:", text]
        return "\n".join(lines)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CaseFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"kvconf case {self.case.name}"
