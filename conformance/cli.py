"""The ``kvconf`` command line: run the suite, replay a trace, print schemas, audit the spec,
prove the formal model.

Every bad input (unknown engine, malformed trace, bad config value, unwritable report) is one line
on stderr naming the place, and exit code 2; a broken rule is exit code 1; a clean run is 0.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from kvconf.conformance.errors import EngineUnavailable, KitError

DEFAULT_EXAMPLES_DB = ".kvconf/examples"  # conformance.examples_db.DEFAULT, without importing it

app = typer.Typer(
    name="kvconf",
    help="Conformance kit for LLM-serving KV / Mamba cache schedulers.",
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
spec_app = typer.Typer(
    help="The normative spec: registry, chapters, catalog.", no_args_is_help=True
)
app.add_typer(spec_app, name="spec")
docs_app = typer.Typer(help="The documentation site, generated from spec/ and reference/.",
                       no_args_is_help=True)
app.add_typer(docs_app, name="docs")

out = Console(soft_wrap=True)
err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        from kvconf.conformance import __version__

        print(f"kvconf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option(
        "--version", callback=_version, is_eager=True,
        help="Print kvconf's version and exit.")] = False) -> None:
    """Conformance kit for LLM-serving KV / Mamba cache schedulers."""

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2
STATUS_STYLE = {
    "PASS": "green", "FAIL": "bold red", "NOT_SUPPORTED": "yellow", "NOT_APPLICABLE": "cyan",
    "ERROR": "bold magenta", "TIMEOUT": "red", "CRASH": "bold red",
}


# Options several commands share, declared once.
EngineOpt = Annotated[str, typer.Option(help="Engine adapter to test (see `kvconf engines`).")]
SeedOpt = Annotated[int, typer.Option(help="Seed of the generators; same seed, same traces.")]
BudgetOpt = Annotated[
    str | None,
    typer.Option(help="Per fuzz case: a number of generated traces (200) or a duration (90s, "
                 "5m, 1h; at most a week)."),
]
ProfileOpt = Annotated[
    str | None,
    typer.Option(help="ci, default or nightly (default: $KVCONF_PROFILE or default)."),
]
ConfigOpt = Annotated[
    list[str] | None,
    typer.Option("--config", help="Engine config override key=value (repeatable)."),
]
CaseOpt = Annotated[
    list[str] | None, typer.Option("--case", help="Run only this case (repeatable).")
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress display.")]
ExpectOpt = Annotated[
    Path | None, typer.Option(help="Expectation file: the engine's known failures (TOML).")
]
JobsOpt = Annotated[
    int, typer.Option("--jobs", "-j", help="Worker processes that run the engine; 0 runs it in "
                      "kvconf's own process (no crash or hang isolation: for debuggers).")
]
ShardOpt = Annotated[
    str | None, typer.Option(help="Run the i-th of N deterministic slices of the work (i/N, "
                             "1 <= i <= N); join the reports with `kvconf merge`.")
]
CallTimeoutOpt = Annotated[
    float, typer.Option(help="Seconds a worker may stay silent (one engine call, one oracle "
                        "check) before its case is TIMEOUT and it is killed.")
]
ExamplesDbOpt = Annotated[
    str, typer.Option(help="Hypothesis example database the workers share: a folder, "
                      "module:attr for any ExampleDatabase, or none.")
]
JunitOpt = Annotated[
    Path | None, typer.Option(help="Also write JUnit XML here (one testcase per case), for CI "
                              "test panes.")
]
TracesOpt = Annotated[
    Path | None, typer.Option(help="With --report -: the folder for the failing traces and the "
                              "working copy of the report (default: a new temporary folder, "
                              "named on stderr).")
]
ReportOpt = Annotated[Path, typer.Option(help="Where to write the JSON report; - writes it to "
                                         "standard output (the table goes to stderr).")]
WorkerMemoryOpt = Annotated[
    str | None, typer.Option(help="Memory (data) each worker process may hold, such as 4GiB "
                             "or 700MiB; 0 for no limit (default 4GiB). Past it the engine's "
                             "memory is a finding (FAULT-5).")
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Run a --config whose cost is past the hard bound "
                       "(docs/campaigns.md, the bounds of a run).")
]
RequirePairsOpt = Annotated[
    bool, typer.Option("--require-pairs", help="Exit 1 when a pair of the engine's declared "
                       "features was never played together (the report's feature_pairs; the "
                       "swarm case, fuzz-scheduler-swarm, must run).")
]


def _die(message: str) -> None:
    sys.stderr.write(f"kvconf: error: {message}\n")
    raise typer.Exit(EXIT_USAGE)


def _default_tests_dir() -> Path:
    """The checkout's tests/ (the audit reads test markers from source)."""
    here = Path.cwd() / "tests"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parent.parent / "tests"


@app.command()
def run(
    engine: EngineOpt = "reference",
    report: ReportOpt = Path("kvconf-report/report.json"),
    seed: SeedOpt = 0,
    budget: BudgetOpt = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    case: CaseOpt = None,
    quiet: QuietOpt = False,
    expect: ExpectOpt = None,
    jobs: JobsOpt = 1,
    shard: ShardOpt = None,
    call_timeout: CallTimeoutOpt = 60.0,
    examples_db: ExamplesDbOpt = DEFAULT_EXAMPLES_DB,
    junit: JunitOpt = None,
    traces: TracesOpt = None,
    require_pairs: RequirePairsOpt = False,
    worker_memory: WorkerMemoryOpt = None,
    force: ForceOpt = False,
) -> None:
    """Run the conformance suite against ENGINE and write a report."""
    from kvconf.conformance.running.runner import run_suite

    _suite(run_suite, engine, report, seed, budget, profile, config, case, quiet, expect,
           jobs=jobs, shard=shard, call_timeout=call_timeout, database=examples_db,
           junit=junit, traces=traces, require_pairs=require_pairs, force=force,
           worker_memory=worker_memory)


class _Stopped(KeyboardInterrupt):
    """SIGTERM (what CI runners send at a time-out), handled as SIGINT is."""


def _on_sigterm(signum, frame) -> None:
    raise _Stopped


class _sigterm_as_interrupt:
    """For the span of a run, SIGTERM interrupts as Ctrl-C does (``_Stopped``), so the run
    writes what it found, stops its workers and exits 143."""

    def __enter__(self) -> None:
        import signal

        self.previous = signal.signal(signal.SIGTERM, _on_sigterm)

    def __exit__(self, *exc) -> None:
        import signal

        signal.signal(signal.SIGTERM, self.previous)


def _suite(runner, engine, report, seed, budget, profile, config, case, quiet, expect,
           shard=None, junit=None, traces=None, require_pairs=False, force=False,
           **extra) -> None:
    """Parse the common options, run the suite with ``runner``, print the table, exit."""
    import contextlib
    import signal

    from kvconf.conformance.engine.config import EngineConfig, parse_overrides
    from kvconf.conformance.reporting.expectations import check_cases, compare, load_expectations
    from kvconf.conformance.reporting.report import report_lock, write_report
    from kvconf.conformance.running.profiles import get_profile, parse_budget
    from kvconf.conformance.running.runner import select_cases
    from kvconf.conformance.running.units import parse_shard

    to_stdout = str(report) == "-"
    show = err if to_stdout else out  # stdout holds the JSON report alone then
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    work = report
    try:
        if traces is not None and not to_stdout:
            raise KitError(f"--traces {traces}: only with --report - (a report file keeps its "
                           "traces next to it, under traces/)")
        expectations = load_expectations(expect) if expect is not None else None
        prof = get_profile(profile)
        bud = parse_budget(budget, prof)
        cfg = parse_overrides(EngineConfig(), config or [])
        _bounds(cfg, force, extra)
        cases = select_cases(case)
        if expectations is not None:
            check_cases(expectations, expect, engine, [c.name for c in cases])
        part = parse_shard(shard)
        if to_stdout:
            work = _stdout_work_report(traces)
        _check_writable(work)
        if junit is not None:
            _check_writable(junit, "--junit")
        # an in-process engine (--jobs 0) that prints must not corrupt the JSON on stdout
        quiet_stdout = (contextlib.redirect_stdout(sys.stderr) if to_stdout
                        else contextlib.nullcontext())
        with report_lock(work), quiet_stdout, _shown(quiet, len(cases)) as display:
            result = runner(
                engine, cfg, seed_value=seed, profile=prof, budget=bud, report_path=work,
                cases=cases, shard=part, **_case_callbacks(display), **extra,
            )
            if expectations is not None:
                compare(result, expectations, expect,
                        [c.name for c in cases] if case else None)
                write_report(result, work)
    except KitError as e:
        _die(str(e))
    except KeyboardInterrupt as e:
        from kvconf.conformance.running.signals import hold_signals

        by = "SIGTERM" if isinstance(e, _Stopped) else "SIGINT"
        with hold_signals():
            _say_interrupted(by, work)
            _emit_partial(work, to_stdout, junit)
        raise typer.Exit(143 if by == "SIGTERM" else 130) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    _emit(result, work, to_stdout, junit)
    _print_results(result, show, work)
    where = f"standard output (working copy and traces: {work.parent})" if to_stdout else report
    show.print(f"report: {where}", highlight=False)
    if junit is not None:
        show.print(f"junit: {junit}", highlight=False)
    pairs_ok = not require_pairs or _pairs_reached(result, show)
    raise typer.Exit(EXIT_OK if result.ok and pairs_ok else EXIT_FAIL)


def _bounds(cfg, force: bool, extra: dict) -> None:
    """The run's bounds, said before it starts (spec chapter faults, "The bounds of a run"):
    the configuration's cost against the default's (a line, or a refusal without --force), the
    workers against the CPUs, and --worker-memory parsed into ``extra``."""
    from kvconf.conformance.engine.config import cost_warning
    from kvconf.conformance.running.bounds import parse_memory

    if "worker_memory" in extra:
        extra["worker_memory"] = parse_memory(extra["worker_memory"])
    line = cost_warning(cfg, force)
    if line:
        sys.stderr.write(f"kvconf: {line}\n")
    _say_jobs(extra.get("jobs", 0))


def _say_jobs(jobs: int) -> None:
    """One line on stderr for a --jobs above the machine's CPUs."""
    from kvconf.conformance.running.bounds import jobs_warning

    line = jobs_warning(jobs)
    if line:
        sys.stderr.write(f"kvconf: {line}\n")


def _pairs_reached(result, show) -> bool:
    """--require-pairs: every pair of declared features was played together (PLAN-9, MAMBA-10,
    L3-1 and WIN-4 are judged in those mixes; a pair never reached is a blind spot)."""
    pairs = (result.run_info.coverage or {}).get("feature_pairs")
    if pairs is None:
        show.print("--require-pairs: no feature-pair coverage in this run (the swarm case, "
                   "fuzz-scheduler-swarm, did not run, or the engine declares fewer than two "
                   "switches)", highlight=False)
        return False
    if pairs["missed"]:
        show.print(f"--require-pairs: {len(pairs['missed'])} declared feature pairs never "
                   f"reached: {', '.join(pairs['missed'])}", highlight=False)
        return False
    return True


def _say_interrupted(by: str, work: Path) -> None:
    """One line on stderr: how far the interrupted run got and where its report is."""
    from kvconf.conformance.reporting.report import load_report

    try:
        partial = load_report(work)
    except KitError:
        partial = None
    if partial is None or not partial.run_info.interrupted:
        line = f"interrupted ({by}) before the run began; no report written"
    else:
        done, left = len(partial.results), len(partial.run_info.not_run)
        line = (f"interrupted ({by}): {done} case{'s' * (done != 1)} finished, {left} did not "
                f"run; the report so far (marked interrupted) is in {work}")
    sys.stderr.write(line + "\n")  # one line, never wrapped: a log is read for it
    sys.stderr.flush()


def _stdout_work_report(traces: Path | None) -> Path:
    """Where a run whose report goes to stdout keeps its working copy (rewritten after every
    case, so an interrupted run still has one) and its failing traces."""
    import tempfile

    if traces is None:
        return Path(tempfile.mkdtemp(prefix="kvconf-")) / "report.json"
    if traces.exists() and not traces.is_dir():
        raise KitError(f"--traces {traces}: exists and is not a folder")
    return traces / "report.json"


def _emit(result, work: Path, to_stdout: bool, junit: Path | None) -> None:
    """The JSON report on stdout (trace paths made openable from here) and the JUnit file."""
    from kvconf.conformance.reporting.junit import write_junit

    if to_stdout:
        shown = result.model_copy(deep=True)
        for r in shown.results:
            if r.trace:
                r.trace = str(work.parent / r.trace)
        sys.stdout.write(shown.summarize().model_dump_json(indent=2) + "\n")
        sys.stdout.flush()
    if junit is not None:
        write_junit(result, junit, work.parent)


def _emit_partial(work: Path, to_stdout: bool, junit: Path | None) -> None:
    """After an interrupt: what the working report kept, on stdout and in the JUnit file."""
    from kvconf.conformance.reporting.report import load_report

    if not to_stdout and junit is None:
        return
    try:
        partial = load_report(work)
    except KitError:
        return  # interrupted before the first case was written
    _emit(partial, work, to_stdout, junit)


@app.command()
def gpu(
    engine: EngineOpt = "reference",
    device: Annotated[
        str, typer.Option(help="Where the KV pools live: auto (CUDA if present), cpu, cuda[:N].")
    ] = "auto",
    report: ReportOpt = Path("kvconf-report/gpu-report.json"),
    dtype: Annotated[str, typer.Option(help="KV dtype: float16, bfloat16, float32, ...")] = (
        "float16"
    ),
    layers: Annotated[int, typer.Option(help="Layers per KV page.")] = 2,
    heads: Annotated[int, typer.Option(help="KV heads per layer.")] = 2,
    head_dim: Annotated[int, typer.Option(help="Elements per head.")] = 8,
    memory_only: Annotated[
        bool, typer.Option("--memory-only",
                           help="Judge by the oracles that read the pools alone.")
    ] = False,
    seed: SeedOpt = 0,
    budget: BudgetOpt = None,
    profile: ProfileOpt = None,
    config: ConfigOpt = None,
    case: CaseOpt = None,
    quiet: QuietOpt = False,
    expect: ExpectOpt = None,
    jobs: JobsOpt = 1,
    shard: ShardOpt = None,
    call_timeout: CallTimeoutOpt = 60.0,
    examples_db: ExamplesDbOpt = DEFAULT_EXAMPLES_DB,
    junit: JunitOpt = None,
    traces: TracesOpt = None,
    worker_memory: WorkerMemoryOpt = None,
    force: ForceOpt = False,
) -> None:
    """Run the suite with the runtime's KV memory in torch pools (GPU harness); same report."""
    try:
        from kvconf.gpu_harness.layout import KVLayout, parse_dtype
        from kvconf.gpu_harness.run import run_gpu
    except ImportError as e:
        _die(f"kvconf gpu needs torch ({e}); install the torch build for your machine first")
    try:
        layout = KVLayout(layers, heads, head_dim, parse_dtype(dtype))
    except KitError as e:
        _die(str(e))
    _suite(run_gpu, engine, report, seed, budget, profile, config, case, quiet, expect,
           device=device, layout=layout, memory_only=memory_only, jobs=jobs, shard=shard,
           call_timeout=call_timeout, database=examples_db, junit=junit, traces=traces,
           worker_memory=worker_memory, force=force)


def _check_writable(report: Path, option: str = "--report") -> None:
    """Refuse a report path the run could not write, before any case runs: a folder, a device,
    a FIFO or a socket (never replaced by a file), or a folder the user cannot write into.
    ``-`` and ``/dev/stdout`` mean standard output and pass."""
    import os

    from kvconf.conformance.trace import is_stream, write_target

    if is_stream(report):
        return
    if report.is_dir():
        raise KitError(f"{option} {report}: is a directory, expected a file path")
    try:
        target = write_target(report)
    except KitError as e:
        raise KitError(f"{option} {e}") from None
    probe = target.parent if str(target.parent) else Path(".")
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise KitError(f"{option} {report}: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise KitError(f"{option} {report}: cannot write into {probe} "
                       "(permission denied)")


def _check_folder(folder: Path, option: str = "--out") -> None:
    """Refuse an output folder that is a file, lies under a file, or cannot be written into."""
    import os

    if folder.exists() and not folder.is_dir():
        raise KitError(f"{option} {folder}: exists and is not a folder")
    probe = folder
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise KitError(f"{option} {folder}: {probe} is not a folder")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise KitError(f"{option} {folder}: cannot write into {probe} (permission denied)")


def _interactive(console: Console) -> bool:
    """Whether ``console`` can show a live display: a real terminal. ``TTY_INTERACTIVE=1`` or
    ``0`` decides when set; otherwise rich's judgement, and only on a tty (``FORCE_COLOR``, set
    in many CI jobs for colour, would otherwise draw a bar into a log)."""
    import os

    forced = os.environ.get("TTY_INTERACTIVE")
    if forced in ("0", "1"):
        return forced == "1"
    return console.is_interactive and _isatty(console.file)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a stream closed under us
        return False


class _Display:
    """What a run shows while it goes: here nothing (``--quiet``). The names are cases or
    mutants; ``plan`` numbers them, ``start`` and ``end`` bracket each, ``note`` is a running
    fuzz unit's progress (``kvconf.conformance.running.progress``)."""

    def plan(self, names: list[str]) -> None:
        pass

    def start(self, name: str) -> None:
        pass

    def end(self, name: str, status: str, detail: str = "", bad: bool = False) -> None:
        """``name`` ended with ``status``; ``bad`` ends are shown even where others are not."""

    def note(self, name: str, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class _Bar(_Display):
    """A rich progress bar on a terminal; a bad end is printed above it."""

    def __init__(self, total: int) -> None:
        self.bar = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
            TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
            console=err, transient=True,
        )
        self.bar.start()
        self.task = self.bar.add_task("starting", total=total)

    def plan(self, names: list[str]) -> None:
        self.bar.update(self.task, total=len(names))

    def start(self, name: str) -> None:
        self.bar.update(self.task, description=escape(name))

    def end(self, name: str, status: str, detail: str = "", bad: bool = False) -> None:
        self.bar.advance(self.task)
        if bad:
            self.bar.console.print(f"[red]{escape(status)}[/] {escape(name)}: {escape(detail)}",
                                   markup=True, highlight=False)

    def note(self, name: str, text: str) -> None:
        self.bar.update(self.task, description=escape(text))

    def close(self) -> None:
        self.bar.stop()


class _Lines(_Display):
    """Plain lines on stderr for a log (CI): one as each case starts, one as it ends with its
    status and wall time, and the notes of running fuzz units, each with the case's place in
    the run (``[12/45]``), so a long or stuck run shows where it is. Display only: the times
    are the log's, never the report's."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.place: dict[str, int] = {}
        self.began: dict[str, float] = {}
        self.unsupported: dict[str, list[str]] = {}  # missing feature -> cases, not yet shown
        self.any_started = False

    def plan(self, names: list[str]) -> None:
        self.total = len(names)
        self.place = {n: i for i, n in enumerate(names, 1)}

    def _say(self, name: str, text: str) -> None:
        self._grouped()
        k = self.place.get(name)
        if k is None:  # a name the plan did not give: number it as it comes
            k = self.place[name] = len(self.place) + 1
        sys.stderr.write(f"[{k}/{self.total}] {text}\n")
        sys.stderr.flush()

    def start(self, name: str) -> None:
        import time

        self.began[name] = time.monotonic()
        self.any_started = True
        self._say(name, f"start {name}")

    def _grouped(self) -> None:
        """The NOT_SUPPORTED cases gathered so far, one line per missing feature (they settle
        together before any case runs; one line each, with their rules, buried the log)."""
        from kvconf.conformance.running.progress import unsupported_line

        for key, names in self.unsupported.items():
            sys.stderr.write(unsupported_line(key, names) + "\n")
        self.unsupported = {}
        sys.stderr.flush()

    def end(self, name: str, status: str, detail: str = "", bad: bool = False) -> None:
        import time

        if status == "NOT_SUPPORTED":
            from kvconf.conformance.running.progress import unsupported_key

            self.unsupported.setdefault(unsupported_key(detail), []).append(name)
            if not self.any_started and name in self.place:  # before any start: renumber
                self.plan([n for n in self.place if n != name])
            return
        took = time.monotonic() - self.began.pop(name, time.monotonic())
        line = f"{status:<5} {name}  {took:.1f}s"
        if detail:
            line += "  " + detail.splitlines()[0]
        self._say(name, line)

    def note(self, name: str, text: str) -> None:
        self._say(name, text)

    def close(self) -> None:
        self._grouped()


def _display(quiet: bool, total: int) -> _Display:
    """The display of a run: nothing when quiet, a bar on a terminal, plain lines elsewhere."""
    if quiet:
        return _Display()
    return _Bar(total) if _interactive(err) else _Lines(total)


class _shown:
    """A display for the span of a run: the runner's callbacks, closed at the end."""

    def __init__(self, quiet: bool, total: int) -> None:
        self.quiet, self.total = quiet, total

    def __enter__(self) -> _Display:
        self.display = _display(self.quiet, self.total)
        return self.display

    def __exit__(self, *exc) -> None:
        self.display.close()


def _case_callbacks(d: _Display) -> dict:
    """The runner's callbacks (``run_suite``) feeding display ``d``."""
    from kvconf.conformance.running.progress import describe

    def on_result(r) -> None:
        bad = r.status.value not in ("PASS", "NOT_SUPPORTED", "NOT_APPLICABLE")
        rule = f"[{r.oracle}] {', '.join(r.behaviours)}: " if r.oracle else ""
        unsupported = r.message if r.status.value == "NOT_SUPPORTED" else ""  # grouped by it
        d.end(r.case, r.status.value, rule + r.message if bad else unsupported, bad)

    return {"on_plan": d.plan, "on_start": lambda case: d.start(case.name),
            "on_result": on_result,
            "on_progress": lambda doc: d.note(doc["case"], describe(doc))}


def _print_table(table: Table, console: Console | None = None) -> None:
    """Print ``table`` with every name whole. On a terminal it fits the terminal: the name
    columns do not wrap, the others (behaviours, messages) wrap instead. Elsewhere (a CI log, a
    file) it is printed at least as wide as its longest words need, past the 80 columns a
    piped console assumes, so no name is cut with "…" or split across lines."""
    from rich.measure import Measurement

    console = console or out
    if _isatty(console.file):
        console.print(table)
        return
    need = Measurement.get(console, console.options.update_width(1 << 16), table).minimum
    if need <= console.width:
        console.print(table)
        return
    wide = Console(file=console.file, width=need, color_system=console.color_system,
                   force_terminal=console.is_terminal, soft_wrap=console.soft_wrap)
    wide.print(table)


def _judged_detail(r) -> str:
    """A passing case's rules as the per-rule verdicts read it (``rule_verdicts``): the rules
    it judged, and how many it cites that no check of which ran (not judged, never passed)."""
    from kvconf.conformance.reporting.report import rule_verdicts

    held = [b for b, _ in rule_verdicts(r)]
    rest = len(set(r.behaviours) - set(held))
    detail = ", ".join(held) if len(held) <= 6 else f"{len(held)} rules judged"
    if not held:
        return f"no rule judged ({len(r.behaviours)} cited)"
    return detail + (f"; {rest} cited, not judged" if rest else "")


def _print_results(report, console: Console | None = None, where: Path | None = None) -> None:
    """The closing table; ``where``, the report's file, places its traces for the replay
    commands printed below it (one per failing case, whole, to paste where the user is)."""
    from kvconf.conformance.reporting.replay_cmd import from_here, replay_command

    console = console or out  # stderr when stdout holds the JSON report
    folder = where.parent if where is not None else Path(".")
    replays = []
    table = Table(title=f"kvconf {report.run_info.engine} (seed {report.run_info.seed}, "
                  f"{report.run_info.profile}, {report.run_info.budget})")
    table.add_column("case", no_wrap=True)
    table.add_column("status")
    table.add_column("s", justify="right")
    table.add_column("behaviours / message", overflow="fold")
    for r in report.results:
        style = STATUS_STYLE.get(r.status.value, "")
        if r.status.value == "PASS":  # the rules it judged (checked, held), not all it cites
            detail = _judged_detail(r)
        else:
            at = f" (step {r.step}, trace {from_here(folder / r.trace)})" if r.trace else ""
            detail = escape(f"[{r.oracle or '-'}] {', '.join(r.behaviours)}: {r.message}{at}")
            if r.trace:
                replays.append(replay_command(folder, r.trace, report.run_info.engine))
            if len(r.findings) > 1:
                detail += escape(f"; {len(r.findings)} distinct findings: "
                                 + ", ".join(f.signature for f in r.findings))
            if r.unexpected:
                detail += escape(f"; new: {', '.join(r.unexpected)}")
        status = f"[{style}]{r.status.value}[/]"
        if r.expectation is not None and r.expectation != "expected":
            status += f" [bold]({r.expectation})[/]"
        elif r.known is not None:
            status += " (known)"
        table.add_row(escape(r.case), status, f"{r.duration_s:.2f}", detail)
    _print_table(table, console)
    for command in replays:  # never wrapped: a command is copied whole
        console.print(f"replay: {command}", markup=False, highlight=False, soft_wrap=True)
    summary = "  ".join(f"{k.value if hasattr(k, 'value') else k}: {v}"
                        for k, v in report.summary.items())
    console.print(summary)
    pairs = (report.run_info.coverage or {}).get("feature_pairs")
    if pairs:  # the swarm's goal: every pair of declared switches played together
        missed = pairs["missed"]
        console.print(f"feature pairs: {pairs['reached']}/{pairs['total']} reached"
                      + (f"; NEVER REACHED: {', '.join(missed)}" if missed else ""),
                      highlight=False)
    exp = report.run_info.expectations
    if exp is not None:
        console.print(f"against {exp['file']}: {len(exp['expected'])} as expected, "
                  f"{len(exp['regression'])} regressions {exp['regression'][:5]}, "
                  f"{len(exp['improvement'])} improvements {exp['improvement'][:5]}",
                  highlight=False)


@app.command()
def mutants(
    report: Annotated[Path, typer.Option(help="Where to write the kill matrix (JSON).")] = Path(
        "kvconf-report/mutants.json"
    ),
    seed: SeedOpt = 0,
    budget: BudgetOpt = None,
    profile: ProfileOpt = None,
    mutant: Annotated[
        list[str] | None, typer.Option("--mutant", help="Only this mutant (repeatable).")
    ] = None,
    fuzz_only: Annotated[
        bool, typer.Option("--fuzz-only", help="Only the fuzz cases, no hand-written scenario.")
    ] = False,
    quiet: QuietOpt = False,
    junit: JunitOpt = None,
    jobs: JobsOpt = 1,
    call_timeout: CallTimeoutOpt = 60.0,
) -> None:
    """Run the suite against every catalog mutant and write the kill matrix; exit 1 if any
    mutant survives. The mutants' cases run in --jobs worker processes, as `kvconf run`'s do;
    the matrix is the same for any number."""
    from kvconf.conformance.mutants import all_mutants
    from kvconf.conformance.mutants.kill import run_mutants
    from kvconf.conformance.running.profiles import get_profile, parse_budget
    from kvconf.conformance.running.progress import describe

    try:
        prof = get_profile(profile)
        bud = parse_budget(budget, prof)
        _check_writable(report)
        if junit is not None:
            _check_writable(junit, "--junit")
        names = [m.name for m in all_mutants() if not mutant or m.name in mutant]
        with _sigterm_as_interrupt(), _shown(quiet, len(names)) as display:
            display.plan(names)

            def on_start(m) -> None:
                display.start(m.name)

            def on_result(m) -> None:  # a survivor shows as a failure line
                status, detail = (("killed", f"by {m.case} [{m.oracle}]") if m.killed
                                  else ("skipped", m.skipped or "") if m.skipped
                                  else ("ALIVE", m.message))
                display.end(m.id, status, detail, bad=status == "ALIVE")

            def on_progress(name: str, doc: dict) -> None:  # a note of one of its fuzz cases
                display.note(name, f"{name} {describe(doc)}")

            _say_jobs(jobs)
            matrix = run_mutants(seed_value=seed, profile=prof, budget=bud, report_path=report,
                                 names=mutant, fuzz_only=fuzz_only, jobs=jobs,
                                 call_timeout=call_timeout, on_result=on_result,
                                 on_start=on_start, on_progress=on_progress)
    except KitError as e:
        _die(str(e))
    except KeyboardInterrupt as e:
        by = "SIGTERM" if isinstance(e, _Stopped) else "SIGINT"
        err.print(f"interrupted ({by}): the results so far are in {report}", highlight=False)
        raise typer.Exit(143 if by == "SIGTERM" else 130) from None
    table = Table(title=f"kvconf mutants (seed {seed}, {prof.name}, {bud}"
                  f"{', fuzz only' if fuzz_only else ''})")
    for col in ("mutant", "catalog", "killed", "s", "by"):
        table.add_column(col, justify="right" if col == "s" else "left", no_wrap=col == "mutant")
    for m in matrix.mutants:
        by = (escape(f"{m.case} [{m.oracle}] {', '.join(m.behaviours)}") if m.killed
              else f"[yellow]skipped: {escape(m.skipped)}[/]" if m.skipped
              else f"[red]{escape(m.message)}[/]")
        killed = ("[green]yes[/]" if m.killed else "[yellow]skipped[/]" if m.skipped
                  else "[red]NO[/]")
        table.add_row(escape(m.id), ", ".join(m.catalog), killed, f"{m.seconds:.2f}", by)
    _print_table(table)
    s = matrix.summary
    out.print(f"killed {s['killed']}/{s['total']}; median {s['median_seconds_to_kill']} s, "
              f"max {s['max_seconds_to_kill']} s to kill"
              + (f"; alive: {', '.join(s['alive'])}" if s["alive"] else "")
              + (f"; skipped here: {', '.join(s['skipped'])}" if s["skipped"] else ""))
    out.print(f"report: {report}")
    if junit is not None:
        from kvconf.conformance.reporting.junit import mutants_junit_xml
        from kvconf.conformance.trace import write_atomic

        write_atomic(junit, mutants_junit_xml(matrix))
        out.print(f"junit: {junit}", highlight=False)
    raise typer.Exit(EXIT_OK if matrix.ok else EXIT_FAIL)


@app.command()
def variants(
    report: Annotated[Path, typer.Option(help="Where to write the variant matrix (JSON).")] = Path(
        "kvconf-report/variants.json"
    ),
    seed: SeedOpt = 0,
    budget: BudgetOpt = None,
    profile: ProfileOpt = None,
    variant: Annotated[
        list[str] | None, typer.Option("--variant", help="Only this variant (repeatable).")
    ] = None,
    quiet: QuietOpt = False,
    jobs: JobsOpt = 1,
    call_timeout: CallTimeoutOpt = 60.0,
) -> None:
    """Run the suite against every legal variant of the reference (the spec's MAY rules and
    allowances) and write the matrix; exit 1 on any false alarm. The variants' cases run in
    --jobs worker processes, as `kvconf run`'s do; the matrix is the same for any number."""
    from kvconf.conformance.running.profiles import get_profile, parse_budget
    from kvconf.conformance.variants.matrix import print_matrix, run_variants

    def on_result(v) -> None:
        if not quiet:
            err.print(f"{v.id}: {v.passed} PASS, {len(v.false_alarms)} false alarms "
                      f"({v.seconds:.1f} s)", highlight=False)

    try:
        prof = get_profile(profile)
        bud = parse_budget(budget, prof)
        _check_writable(report)
        _say_jobs(jobs)
        matrix = run_variants(seed_value=seed, profile=prof, budget=bud, report_path=report,
                              names=variant, jobs=jobs, call_timeout=call_timeout,
                              on_result=on_result)
    except KitError as e:
        _die(str(e))
    except KeyboardInterrupt:
        err.print(f"interrupted: the results so far are in {report}")
        raise typer.Exit(130) from None
    print_matrix(matrix, out, report)
    raise typer.Exit(EXIT_OK if matrix.ok else EXIT_FAIL)


@app.command()
def merge(
    shards: Annotated[list[Path], typer.Argument(help="The shard reports (kvconf run --shard "
                                                 "i/N), all N of them.")],
    report: Annotated[Path, typer.Option(help="Where to write the merged report.")] = Path(
        "kvconf-report/report.json"
    ),
    expect: ExpectOpt = None,
    junit: JunitOpt = None,
) -> None:
    """Join the reports of a sharded run into the report one run would have written (summary,
    transition coverage, every case, the failing traces); exit 1 if a case failed."""
    from kvconf.conformance.reporting.expectations import compare, load_expectations
    from kvconf.conformance.reporting.merge import merge_reports
    from kvconf.conformance.reporting.report import report_lock, write_report

    try:
        expectations = load_expectations(expect) if expect is not None else None
        _check_writable(report)
        with report_lock(report):
            result = merge_reports(shards, report)
            if expectations is not None:
                compare(result, expectations, expect)
            write_report(result, report)
        if junit is not None:
            from kvconf.conformance.reporting.junit import write_junit

            _check_writable(junit, "--junit")
            write_junit(result, junit, report.parent)
    except KitError as e:
        _die(str(e))
    _print_results(result, where=report)
    out.print(f"merged {len(shards)} shards: {report}")
    raise typer.Exit(EXIT_OK if result.ok else EXIT_FAIL)


@app.command("diff")
def diff_cmd(
    base: Annotated[Path, typer.Argument(help="The run report before the change.")],
    head: Annotated[Path, typer.Argument(help="The run report after the change.")],
    as_json: Annotated[bool, typer.Option("--json", help="The diff as JSON on stdout.")] = False,
    allow_engine_change: Annotated[
        bool, typer.Option("--allow-engine-change",
                           help="Compare runs of different engines (by case name).")
    ] = False,
) -> None:
    """What changed between two runs of an engine: new failures, fixes, status changes, cases
    gone or new, failures that now break another rule; exit 1 on a regression (a new failure,
    or a case gone that passed)."""
    from kvconf.conformance.reporting.diff import diff_reports, diff_summary, diff_table

    try:
        d = diff_reports(base, head, allow_engine_change)
    except KitError as e:
        _die(str(e))
    if d.differ_in:
        err.print(f"note: the runs differ in {', '.join(d.differ_in)}; fuzz findings (and, "
                  "with another config, the NOT_APPLICABLE cases) may move for that reason "
                  "alone", highlight=False)
    if as_json:
        sys.stdout.write(d.model_dump_json(indent=2) + "\n")
    else:
        if d.changed:
            _print_table(diff_table(d))
        out.print(diff_summary(d), highlight=False)
    raise typer.Exit(EXIT_FAIL if d.regression else EXIT_OK)


@app.command("report")
def report_cmd(
    results: Annotated[
        list[Path], typer.Argument(help="Run reports (kvconf run / gpu) and kill matrices.")
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the report; the failing "
                                          "traces are copied into it, so it can be moved.")] = Path(
        "kvconf-report/compliance"
    ),
    spec_url: Annotated[
        str | None, typer.Option(help="Address of the spec site's spec/ folder (kvconf docs "
                                 "build), to link every rule to its page; default: plain IDs.")
    ] = None,
) -> None:
    """Write a compliance report (Markdown and a self-contained HTML page) from run reports
    and kill matrices: behaviours x engines, failures with their traces, transition coverage,
    the kill matrix."""
    from kvconf.conformance.reporting.compliance import build, load_inputs

    try:
        _check_folder(out_dir)
        base = spec_url if spec_url is None or spec_url.endswith("/") else spec_url + "/"
        md, html = build(load_inputs(results), out_dir, copy_traces=True, spec_base=base)
    except KitError as e:
        _die(str(e))
    out.print(f"wrote {md} and {html}")


@app.command()
def replay(
    trace: Annotated[Path, typer.Argument(help="A trace file (kvconf-trace/1 JSON).")],
    engine: Annotated[str, typer.Option(help="Engine adapter to replay it on.")] = "reference",
    no_determinism: Annotated[
        bool, typer.Option("--no-determinism", help="Skip the second run (DET-1).")
    ] = False,
    in_process: Annotated[
        bool, typer.Option("--in-process", help="Play it in kvconf's own process, not in a "
                           "worker (no crash or hang isolation: for debuggers).")
    ] = False,
    call_timeout: CallTimeoutOpt = 60.0,
    explain: Annotated[
        bool, typer.Option("--explain", help="Then show the engine's and the reference's answer "
                           "side by side at every step (a scheduler-level trace: plan by plan; "
                           "played in kvconf's own process).")
    ] = False,
) -> None:
    """Replay one trace against ENGINE with every oracle; exit 1 if a rule breaks or the
    engine crashes or hangs (CRASH and TIMEOUT traces replay as they were found)."""
    from kvconf.conformance.adapters import (
        check_engine,
        engine_factory,
        hybrid_engine_factory,
        sched_engine_factory,
    )
    from kvconf.conformance.trace import Trace, load_any_trace

    try:
        t = load_any_trace(trace)
        check_engine(engine)
        if isinstance(t, Trace):
            engine_factory(engine)
        elif getattr(t, "level", None) == "hybrid":
            if hybrid_engine_factory(engine) is None:
                raise KitError(f"{trace}: a hybrid-level trace, and engine {engine} offers no "
                               "hybrid level")
        elif sched_engine_factory(engine) is None:
            raise KitError(f"{trace}: a scheduler-level trace, and engine {engine} speaks only "
                           "the cache level")
        doc = (_replay_here(t, engine, not no_determinism) if in_process
               else _replay_in_worker(t, engine, not no_determinism, call_timeout))
    except KitError as e:
        _die(f"{trace}: {e}" if not str(e).startswith(str(trace)) else str(e))
    except EngineUnavailable as e:
        _die(f"engine {engine} is not available: {e}")
    if explain:
        _explain(t, engine, doc.get("step"))
    if doc["status"] == "PASS":
        out.print(f"[green]PASS[/] {escape(str(trace))} on {escape(engine)}: {doc['steps']} "
                  "steps, every oracle held", highlight=False)
        return
    if doc["status"] == "NOT_SUPPORTED":
        out.print(f"[yellow]NOT_SUPPORTED[/] {escape(str(trace))} on {escape(engine)}: "
                  f"{escape(doc['message'])}", highlight=False)
        raise typer.Exit(EXIT_USAGE)
    step = f"step {doc['step']}" if doc.get("step") is not None else "the run"
    if doc["status"] == "FAIL":
        out.print(f"[bold red]FAIL[/] {escape(str(trace))} on {escape(engine)} at {step}: "
                  f"{escape('[' + doc['oracle'] + ']')} {', '.join(doc['behaviours'])}: "
                  f"{escape(doc['message'])}", highlight=False)
    else:
        out.print(f"[bold red]{doc['status']}[/] {escape(str(trace))} on {escape(engine)}: "
                  f"{escape(doc['message'])}", highlight=False)
        for part in ("traceback", "output"):
            if doc.get(part):
                out.print(f"[bold]{part}[/]:", highlight=False)
                out.print(doc[part], markup=False, highlight=False)
    raise typer.Exit(EXIT_FAIL)


def _explain(t, engine: str, failed_step: int | None) -> None:
    """``replay --explain``: both answers at every step (``kvconf.conformance.reporting.explain``)
    before the verdict's line."""
    from kvconf.conformance.adapters import (
        engine_factory,
        hybrid_engine_factory,
        sched_engine_factory,
    )
    from kvconf.conformance.reporting import explain as ex
    from kvconf.conformance.trace import Trace

    if isinstance(t, Trace):
        shown = ex.explain(t, engine_factory(engine), engine_factory("reference"), failed_step)
    elif getattr(t, "level", None) == "hybrid":
        shown = ex.explain(t, hybrid_engine_factory(engine), hybrid_engine_factory("reference"),
                           failed_step)
    else:
        shown = ex.explain_plans(t, sched_engine_factory(engine),
                                 sched_engine_factory("reference"), failed_step)
    if _isatty(out.file):
        _print_table(ex.table(shown, engine))
    else:
        for line in ex.plain(shown, engine):
            out.print(line, markup=False, highlight=False, soft_wrap=True)


def _replay_here(t, engine: str, determinism: bool) -> dict:
    from kvconf.conformance.running.worker import replay_doc

    return replay_doc(engine, t, determinism)


def _replay_in_worker(t, engine: str, determinism: bool, call_timeout: float) -> dict:
    from kvconf.conformance.engine.config import EngineConfig
    from kvconf.conformance.running.cases import trace_text
    from kvconf.conformance.running.pool import Pool, WorkerSpec
    from kvconf.conformance.running.profiles import get_profile, parse_budget

    prof = get_profile("ci")
    pool = Pool(WorkerSpec(engine=engine, config=EngineConfig(), seed=0, profile=prof,
                           budget=parse_budget(None, prof)), 1, call_timeout)
    try:
        return pool.replay(trace_text(t), determinism)
    finally:
        pool.close()


@app.command()
def window(
    model_config: Annotated[Path, typer.Argument(help="A model config.json (Hugging Face style).")],
) -> None:
    """Print the sliding window a model config states, read by the spec's rule (WIN-1: the top
    level or the nested text_config; 0 means full attention)."""
    from kvconf.conformance.engine.model_config import model_window

    try:
        size = model_window(model_config)
    except KitError as e:
        _die(str(e))
    out.print(f"{model_config}: sliding window {size}" if size else
              f"{model_config}: full attention (no sliding window)", highlight=False)


@app.command()
def schema(
    what: Annotated[str, typer.Argument(help="trace or report")] = "trace",
) -> None:
    """Print the JSON Schema of the trace format or the report format."""
    from kvconf.conformance.reporting.report import report_schema
    from kvconf.conformance.trace import trace_schema

    schemas = {"trace": trace_schema, "report": report_schema}
    if what not in schemas:
        _die(f"schema {what!r}: unknown (known: {', '.join(schemas)})")
    sys.stdout.write(json.dumps(schemas[what](), indent=2) + "\n")


@app.command()
def engines() -> None:
    """List the engines this installation knows: each short name and the factory it stands for
    (the bundled adapters and the ``kvconf.engines`` entry points of installed packages)."""
    from kvconf.conformance.adapters import registry

    try:
        for name, registered in registry().items():
            out.print(f"{name}  {registered.target}", highlight=False, markup=False)
    except KitError as e:
        _die(str(e))


@app.command("check-engine")
def check_engine(
    name: Annotated[str, typer.Argument(help="The engine: a short name (`kvconf engines`) or "
                                        "module:factory, as `kvconf run --engine` takes it.")],
    config: ConfigOpt = None,
) -> None:
    """Hold an engine to the adapter contract (docs/api.md): every missing or mistyped
    attribute or method is one line, exit 1; an engine that meets it gets what it declares and
    the cases it can run, exit 0. Every run checks the same first."""
    from kvconf.conformance.engine.config import EngineConfig, parse_overrides
    from kvconf.conformance.running.check import check

    try:
        checked = check(name, parse_overrides(EngineConfig(), config or []))
    except KitError as e:
        _die(str(e))
    (sys.stdout if checked.ok else sys.stderr).write("".join(f"{x}\n" for x in checked.text()))
    raise typer.Exit(EXIT_OK if checked.ok else EXIT_FAIL)


@docs_app.command("protocol")
def docs_protocol(
    page: Annotated[Path, typer.Option(help="The page holding the generated section.")] = Path(
        "docs/api.md"),
    check: Annotated[bool, typer.Option(help="Only check that the page is current; exit 1 if "
                                        "not.")] = False,
) -> None:
    """Write docs/api.md's protocol reference from the protocols' docstrings (each attribute,
    method and answer field is defined once, in conformance/engine/protocol.py)."""
    from kvconf.conformance.engine.contract_doc import write

    try:
        current = write(page, check=check)
    except KitError as e:
        _die(str(e))
    if check and not current:
        sys.stderr.write(f"{page}: the protocol reference is stale; run `kvconf docs protocol`\n")
        raise typer.Exit(EXIT_FAIL)


@docs_app.command("build")
def docs_build(
    out_dir: Annotated[Path, typer.Option("--out", help="Folder for the built site.")] = Path(
        "site"
    ),
    reports: Annotated[
        list[Path] | None,
        typer.Option("--reports", help="Run reports and kill matrices for the results section, "
                     "beside the runs committed under docs/peers (a report replaces the committed "
                     "one of the same engine, version and memory; repeatable)."),
    ] = None,
    strict: Annotated[bool, typer.Option(help="Fail on any broken link or anchor.")] = True,
) -> None:
    """Generate the site's pages (behaviours, catalog, diagrams, formats, results) and build it
    with mkdocs-material."""
    from kvconf.conformance.reporting.docsite import build_site

    try:
        _check_folder(out_dir)
        site = build_site(out_dir, reports or [], strict=strict)
    except KitError as e:
        _die(str(e))
    except OSError as e:
        _die(f"--out {out_dir}: cannot write the site ({e.strerror}: {e.filename})")
    out.print(f"site: {site}/index.html")


@app.command()
def prove(
    report: Annotated[Path, typer.Option(help="Where to write the JSON proof report.")] = Path(
        "kvconf-report/prove.json"
    ),
    scope: Annotated[
        str,
        typer.Option(help="Bounded scope over the default, key=value,... (namespaces, tokens, "
                     "depth, device_pages, host_pages, locks, transfers, requests)."),
    ] = "",
    depth: Annotated[int, typer.Option(help="BMC depth for counterexamples and reachability.")] = (
        10
    ),
    timeout: Annotated[int, typer.Option(help="Solver time-out per query, seconds.")] = 60,
) -> None:
    """Prove the formal model's invariants (z3) at a bounded scope; exit 1 unless all proved."""
    from kvconf.conformance.trace import write_atomic
    from kvconf.spec.formal.report import prove_all
    from kvconf.spec.formal.scope import parse_scope

    try:
        sc = parse_scope(scope)
    except ValueError as e:
        _die(f"--scope {e}")
    if depth < 1:
        _die(f"--depth {depth}: must be >= 1")
    if timeout < 1:
        _die(f"--timeout {timeout}: must be >= 1")
    try:
        _check_writable(report)
    except KitError as e:
        _die(str(e))
    doc = prove_all(sc, depth=depth, timeout_ms=timeout * 1000, out_dir=report.parent)
    write_atomic(report, json.dumps(doc, indent=2) + "\n")
    table = Table(title=f"kvconf prove ({doc['scope']['text']})")
    for col in ("obligation", "behaviours", "status", "s", "detail"):
        table.add_column(col, justify="right" if col == "s" else "left",
                         no_wrap=col == "obligation", overflow="fold")
    style = {"proved": "green", "counterexample": "bold red", "unknown": "yellow"}
    for r in doc["obligations"]:
        detail = r["detail"] + (f" (trace {r['trace']})" if r.get("trace") else "")
        table.add_row(r["obligation"], ", ".join(r["behaviours"]),
                      f"[{style[r['status']]}]{r['status']}[/]", f"{r['seconds']:.2f}", detail)
    _print_table(table)
    for r in doc["obligations"]:
        if r.get("cti"):
            out.print(f"[bold]{r['obligation']}[/]: counterexample to induction", highlight=False)
            out.print("\n".join(r["cti"]), highlight=False, markup=False)
    out.print(f"report: {report}")
    raise typer.Exit(EXIT_OK if doc["ok"] else EXIT_FAIL)


@spec_app.command("audit")
def spec_audit(
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    tests: Annotated[
        Path | None, typer.Option(help="Test folder to read markers from (default: ./tests).")
    ] = None,
) -> None:
    """Check the registry against chapters, oracles and tests; exit 1 on any gap."""
    from kvconf.spec.audit import audit
    from kvconf.spec.registry import SpecError, load_registry

    try:
        registry = load_registry()
    except SpecError as e:
        _die(str(e))
    res = audit(registry, tests if tests is not None else _default_tests_dir())
    if as_json:
        sys.stdout.write(json.dumps(res.as_json(), indent=2, sort_keys=True) + "\n")
    else:
        covered = sum(1 for v in res.catalog.values() if v)
        out.print(f"{res.behaviours} behaviours; catalog covered {covered}/{len(res.catalog)}")
        planted = sum(1 for v in res.mutants.values() if v)
        out.print(f"catalog planted as mutants {planted}/{len(res.mutants)}")
        taken = sum(1 for v in res.variants.values() if v)
        out.print(f"open rules taken by a legal variant {taken}/{len(res.variants)}")
        for d, ids in sorted(res.catalog.items()):
            muts = res.mutants.get(d, [])
            out.print(f"  {d}: {', '.join(ids) if ids else '[yellow]not yet guarded[/]'}; "
                      f"mutants: {', '.join(muts) if muts else '[yellow]none yet[/]'}")
        for g in res.gaps:
            out.print(f"[red]gap[/] {g}", highlight=False)
        out.print("audit: " + ("[green]ok[/]" if not res.gaps else f"[red]{len(res.gaps)} gaps[/]"))
    raise typer.Exit(EXIT_FAIL if res.gaps else EXIT_OK)


@spec_app.command("list")
def spec_list() -> None:
    """Print every behaviour: ID, level, chapter, statement."""
    from kvconf.spec.registry import SpecError, load_registry

    try:
        registry = load_registry()
    except SpecError as e:
        _die(str(e))
    for b in registry.behaviours.values():
        guards = f" [{', '.join(b.guards)}]" if b.guards else ""
        out.print(f"[bold]{b.id}[/] {b.level.value} ({b.chapter}){guards}: {b.statement}",
                  highlight=False)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
