"""``kvconf.run``: the suite from Python, with the CLI's defaults and its one-line errors."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from kvconf.conformance.engine.config import EngineConfig
from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.expectations import check_cases, compare, load_expectations
from kvconf.conformance.reporting.report import Report, report_lock, write_report
from kvconf.conformance.running.profiles import get_profile, parse_budget
from kvconf.conformance.running.runner import run_suite, select_cases


def engine_name(engine: str | Callable[..., Any]) -> str:
    """A short name, ``module:factory``, or a factory defined at a module's top level (workers
    import it by name, so a lambda or a nested function cannot cross to them)."""
    if isinstance(engine, str):
        return engine
    module, qualname = getattr(engine, "__module__", None), getattr(engine, "__qualname__", "")
    if not module or "<" in qualname or module == "__main__":
        raise KitError(f"engine {engine!r}: pass a short name or 'module:factory', or a factory "
                       "defined at the top level of an importable module")
    return f"{module}:{qualname}"


def run(
    engine: str | Callable[..., Any],
    *,
    report: str | Path | None = "kvconf-report/report.json",
    config: EngineConfig | None = None,
    cases: Sequence[str] | None = None,
    profile: str = "default",
    budget: str | None = None,
    seed: int = 0,
    jobs: int = 1,
    expect: str | Path | None = None,
    call_timeout: float = 60.0,
    examples_db: str | None = ".kvconf/examples",
) -> Report:
    """Run the conformance suite against ``engine`` as ``kvconf run`` does and return the
    report (also written to ``report`` unless it is None). ``report.ok`` is the verdict: every
    case passed or was not supported, or, with ``expect``, every case ended as the file says.
    ``examples_db`` is Hypothesis's example database (None: none), as ``--examples-db``. Bad
    input raises ``KitError`` with the one-line message the CLI prints."""
    name = engine_name(engine)
    prof = get_profile(profile)
    selected = select_cases(list(cases) if cases else None)
    expectations = load_expectations(Path(expect)) if expect is not None else None
    if expectations is not None:
        check_cases(expectations, Path(expect), name, [c.name for c in selected])
    path = Path(report) if report is not None else None
    with report_lock(path) if path is not None else contextlib.nullcontext():
        result = run_suite(name, config or EngineConfig(), seed_value=seed, profile=prof,
                           budget=parse_budget(budget, prof), report_path=path, cases=selected,
                           jobs=jobs, call_timeout=call_timeout, database=examples_db)
    if expectations is not None:
        compare(result, expectations, Path(expect), list(cases) if cases else None)
        if path is not None:
            write_report(result, path)
    return result
