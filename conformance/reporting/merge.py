"""Merging shard reports: N slices of one run (``--shard i/N``) joined into the report of the
whole run, as one machine would have written it.

The shards must be slices of the same run (engine, version, kvconf, seed, profile, budget, config)
and all N of them must be there. A hand-written case was run by one shard; a fuzz case's units are
spread over all of them, and its result is rebuilt from every shard's units exactly as a single run
settles it (``kvconf.conformance.running.units.combine``): up to the first unit that ended it,
its findings merged by signature. The traces the shards saved (the case's and each finding's)
are copied next to the merged report."""

from __future__ import annotations

import shutil
from pathlib import Path

from kvconf.conformance.errors import KitError
from kvconf.conformance.reporting.report import CaseResult, Report, load_report
from kvconf.conformance.running.units import combine, failed, union

SAME = ("engine", "version", "kvconf", "seed", "profile", "budget", "config", "features")


def _check(reports: list[tuple[Path, Report]]) -> int:
    """The shard count; a one-line error naming the report that does not fit."""
    first_path, first = reports[0]
    counts = set()
    seen: dict[int, Path] = {}
    for path, r in reports:
        info = r.run_info
        if info.shard is None:
            raise KitError(f"{path}: not a shard report (run_info.shard is empty; made without "
                           "--shard)")
        index, count = (int(x) for x in info.shard.split("/"))
        counts.add(count)
        if index in seen:
            raise KitError(f"{path}: shard {info.shard} is also {seen[index]}")
        seen[index] = path
        for key in SAME:
            if getattr(info, key) != getattr(first.run_info, key):
                raise KitError(f"{path}: run_info.{key} is {getattr(info, key)!r}, but "
                               f"{first_path} has {getattr(first.run_info, key)!r}: not "
                               "shards of one run")
    if len(counts) != 1:
        raise KitError(f"shards of different splits: {sorted(counts)}")
    count = counts.pop()
    missing = [i for i in range(1, count + 1) if i not in seen]
    if missing:
        raise KitError(f"shard{'s' if len(missing) > 1 else ''} "
                       f"{', '.join(f'{i}/{count}' for i in missing)} missing")
    return count


def merge_reports(paths: list[Path], out: Path | None = None) -> Report:
    """The whole run's report from its shard reports (traces copied next to ``out``)."""
    from kvconf.conformance.running.runner import all_cases, transition_coverage

    if not paths:
        raise KitError("merge: no shard reports given")
    reports = [(Path(p), load_report(p)) for p in paths]
    _check(reports)
    cases = {c.name: c for c in all_cases()}
    order = {name: i for i, name in enumerate(cases)}
    by_case: dict[str, list[tuple[Path, CaseResult]]] = {}
    for path, r in reports:
        for res in r.results:
            by_case.setdefault(res.case, []).append((path, res))
    results: list[CaseResult] = []
    source: dict[str, Path] = {}  # case -> the shard report whose trace the result keeps
    found_in: dict[tuple[str, str], Path] = {}  # (case, a finding's trace) -> its shard report
    for name, entries in by_case.items():
        if all(res.units is None for _, res in entries):
            path, res = entries[0]
            if len(entries) > 1:
                raise KitError(f"{entries[1][0]}: case {name} is also in {path}; a hand-written "
                               "case belongs to one shard")
        else:
            doc = cases[name].doc if name in cases else ""
            res = combine([res for _, res in entries if res.units], doc)
            # The shard of the unit whose result is the case's: the first that did not pass.
            first = next((u.index for u in res.units if failed(u.status)), res.units[-1].index)
            path = _holding(entries, first)
            for f in res.findings:  # each finding's trace is in the shard of its unit
                if f.trace and f.unit is not None:
                    found_in[(name, f.trace)] = _holding(entries, f.unit)
        results.append(res)
        source[name] = path
    results.sort(key=lambda r: (order.get(r.case, len(order)), r.case))
    infos = [r.run_info for _, r in reports]
    info = infos[0].model_copy(update={
        "shard": None, "merged": [str(p) for p, _ in reports],
        "jobs": max(i.jobs for i in infos),
        "started": min(i.started for i in infos),
        "finished": None if any(i.finished is None for i in infos)
        else max(i.finished for i in infos),
        "interrupted": any(i.interrupted for i in infos),
        "not_run": sorted({c for i in infos for c in i.not_run}),
        "cut": "; ".join(dict.fromkeys(i.cut for i in infos if i.cut)) or None,
        "expectations": None,
        "coverage": transition_coverage(union(r.coverage for r in results), infos[0].features),
    })
    merged = Report(run_info=info, results=results).summarize()
    if out is not None:
        for r in merged.results:
            wanted = [(r.trace, source[r.case])] if r.trace else []
            wanted += [(f.trace, found_in.get((r.case, f.trace), source[r.case]))
                       for f in r.findings if f.trace]
            for trace, shard in wanted:
                src = shard.parent / trace
                if src.exists():
                    dest = out.parent / trace
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    if src.resolve() != dest.resolve():
                        shutil.copyfile(src, dest)
    return merged


def _holding(entries: list[tuple[Path, CaseResult]], unit: int) -> Path:
    """The shard report among ``entries`` that ran ``unit`` (the first, if none says)."""
    return next((p for p, e in entries if e.units and unit in {u.index for u in e.units}),
                entries[0][0])
