"""JUnit XML beside the JSON report (``--junit PATH``), so CI systems that only read JUnit
(GitHub, GitLab, Jenkins, Buildkite test panes) show each case, its rule and how to replay it.

One ``<testsuite>`` per run, one ``<testcase>`` per case (``classname`` = the engine, ``name`` =
the case). FAIL is a ``<failure>``; CRASH, TIMEOUT and ERROR are ``<error>`` elements; NOT_SUPPORTED
and NOT_APPLICABLE are ``<skipped>`` with the reason. With an expectation file the verdict
decides: a known gap that ended as expected is skipped ("expected failure: ..."), a regression or
an improvement (both fail the run) is a failure; a NOT_APPLICABLE case, which the run's config
decided before it ran, is skipped with its reason whatever the file says. The text holds the
step, the trace path and the ``kvconf replay`` command.

Each ``<testcase>`` carries its per-rule verdicts as ``<properties>`` (``report.rule_verdicts``):
one ``<property name="PIN-2" value="PASS"/>`` per rule the case cites or judged, ``not judged``
for a rule a check of which did not run in it (a passing case passes only the rules it judged);
the suite's ``rules`` property counts the run's verdicts over the rules its cases cite or judged.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from kvconf.conformance.reporting.report import BAD, CaseResult, Report, Status, rule_verdicts
from kvconf.conformance.reporting.verdicts import NOT_JUDGED, run_verdicts, tally
from kvconf.conformance.trace import write_atomic

# Characters XML 1.0 cannot hold at all (an engine's output may carry ANSI escapes or NULs).
_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: str) -> str:
    """Text XML 1.0 can hold: characters it forbids are written as ``\\xNN``, so nothing of the
    engine's output is lost and the file still parses."""
    return _ILLEGAL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


def _trace_path(base: Path, trace: str | None) -> str | None:
    """The trace as the caller can open it: next to the report as the caller named it."""
    return str(base / trace) if trace else None


def _details(r: CaseResult, engine: str, base: Path) -> str:
    """What a reader of a CI test pane needs to act: where it broke and how to replay it."""
    lines = [f"status: {r.status.value}"]
    if r.oracle:
        lines.append(f"oracle: {r.oracle}")
    if r.behaviours:
        lines.append(f"rules: {', '.join(r.behaviours)}")
    if r.step is not None:
        lines.append(f"step: {r.step}")
    if r.message:
        lines.append(f"message: {r.message}")
    trace = _trace_path(base, r.trace)
    if trace:
        lines += [f"trace: {trace}", f"replay: kvconf replay {trace} --engine {engine}"]
    if r.known:
        lines.append(f"known: {r.known}")
    if r.unexpected:
        lines.append(f"new findings (not in the expectation file): {', '.join(r.unexpected)}")
    if len(r.findings) > 1 or (r.findings and r.unexpected):
        lines.append(f"findings ({len(r.findings)} distinct"
                     + (f", {r.repeats} repeats skipped" if r.repeats else "") + "):")
        for f in r.findings:
            ftrace = _trace_path(base, f.trace)
            lines.append(f"  {f.signature}: {f.message}"
                         + (f" (trace {ftrace}; kvconf replay {ftrace} --engine {engine})"
                            if ftrace else ""))
    if r.exit_code is not None:
        lines.append(f"exit code: {r.exit_code}")
    if r.signal:
        lines.append(f"signal: {r.signal}")
    for part in ("traceback", "output"):
        value = getattr(r, part)
        if value:
            lines += ["", f"{part}:", value]
    return "\n".join(lines)


def _headline(r: CaseResult) -> str:
    """The failure's one line: its rules, then what happened."""
    rules = ", ".join(r.behaviours) or "-"
    return f"{r.status.value} {rules}: {r.message}" if r.message else f"{r.status.value} {rules}"


def _verdict(r: CaseResult) -> tuple[str | None, str, str]:
    """(element, type, message prefix) for a result: element None means it passed."""
    if r.status is Status.NOT_APPLICABLE:  # nothing judged: the reason names the config
        return "skipped", "", ""
    if r.expectation == "expected":
        if r.status in BAD or (r.known and r.status is Status.NOT_SUPPORTED):
            return "skipped", "expected", "expected failure: "
        return ("skipped", "", "") if r.status is Status.NOT_SUPPORTED else (None, "", "")
    if r.expectation == "regression":
        return "failure", "regression", "regression: "
    if r.expectation == "improvement":
        return "failure", "improvement", ("improvement (a known failure now passes; remove its "
                                          "line from the expectation file): ")
    if r.status is Status.PASS:
        return None, "", ""
    if r.status is Status.NOT_SUPPORTED:
        return "skipped", "", ""
    return ("failure" if r.status is Status.FAIL else "error"), r.status.value, ""


def _rule_properties(case: ET.Element, r: CaseResult) -> None:
    """The case's verdict on each rule it cites or judged; a rule it cites whose check did not
    run is ``not judged``, never PASS."""
    got = dict(rule_verdicts(r))
    rules = list(dict.fromkeys([*r.behaviours, *got]))
    if not rules:
        return
    props = ET.SubElement(case, "properties")
    for b in rules:
        ET.SubElement(props, "property", name=_clean(b),
                      value=got[b].value if b in got else NOT_JUDGED)


def junit_xml(report: Report, base: Path) -> str:
    """The report as JUnit XML; trace paths are ``base`` (the report's folder) / trace."""
    info = report.run_info
    engine = info.engine
    suite = ET.Element("testsuite", name=_clean(f"kvconf {engine}"))
    props = ET.SubElement(suite, "properties")  # first, as the JUnit schema orders them
    for key in ("engine", "version", "seed", "profile", "budget"):
        ET.SubElement(props, "property", name=key, value=_clean(str(getattr(info, key))))
    cited = dict.fromkeys(b for r in report.results for b in [*r.behaviours, *(r.judged or ())])
    ET.SubElement(props, "property", name="rules",
                  value=_clean(tally(run_verdicts(report, cited)) or "none cited"))
    counts = {"failure": 0, "error": 0, "skipped": 0}
    total_time = 0.0
    for r in report.results:
        case = ET.SubElement(suite, "testcase", classname=_clean(engine), name=_clean(r.case),
                             time=f"{r.duration_s:.3f}")
        total_time += r.duration_s
        _rule_properties(case, r)
        element, kind, prefix = _verdict(r)
        if element is None:
            continue
        counts[element] += 1
        if element == "skipped":
            reason = r.known.rsplit(" (", 1)[0] if prefix and r.known else r.message
            ET.SubElement(case, "skipped", message=_clean(prefix + (reason or r.status.value)))
            continue
        if r.expectation == "improvement":
            head = f"{r.case} passes; known: {r.known}"
        elif r.expectation == "regression" and r.known:
            head = f"{_headline(r)} (the expectation file lists another status: {r.known})"
        else:
            head = _headline(r)
        node = ET.SubElement(case, element, message=_clean(prefix + head), type=kind)
        node.text = _clean(_details(r, engine, base))
    played = {r.case for r in report.results}
    not_run = [n for n in info.not_run if n not in played]
    for name in not_run:  # an interrupted run: the cases it did not finish
        case = ET.SubElement(suite, "testcase", classname=_clean(engine), name=_clean(name),
                             time="0.000")
        ET.SubElement(case, "skipped", message="not run: the run was interrupted")
        counts["skipped"] += 1
    suite.set("tests", str(len(report.results) + len(not_run)))
    suite.set("failures", str(counts["failure"]))
    suite.set("errors", str(counts["error"]))
    suite.set("skipped", str(counts["skipped"]))
    suite.set("time", f"{total_time:.3f}")
    root = ET.Element("testsuites", name="kvconf", tests=suite.get("tests", "0"),
                      failures=suite.get("failures", "0"), errors=suite.get("errors", "0"),
                      skipped=suite.get("skipped", "0"), time=suite.get("time", "0"))
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def write_junit(report: Report, path: Path, base: Path) -> Path:
    """Write atomically, as the JSON report is: a CI step never reads half a file."""
    return write_atomic(path, junit_xml(report, base))


def mutants_junit_xml(matrix) -> str:
    """A kill matrix as JUnit: one testcase per mutant, a survivor is a failure."""
    suite = ET.Element("testsuite", name="kvconf mutants")
    failures = skipped = 0
    for m in matrix.mutants:
        case = ET.SubElement(suite, "testcase", classname="mutants", name=_clean(m.id),
                             time=f"{m.seconds:.3f}")
        if m.skipped:
            skipped += 1
            ET.SubElement(case, "skipped", message=_clean(m.skipped))
        elif not m.killed:
            failures += 1
            node = ET.SubElement(case, "failure", type="alive", message=_clean(
                f"alive: no case kills {m.id} ({', '.join(m.catalog)}): {m.message}"))
            node.text = _clean(f"catalog: {', '.join(m.catalog)}\nseed: {matrix.run_info.seed}"
                               f"\nprofile: {matrix.run_info.profile}\n{m.message}")
    for key, value in (("tests", len(matrix.mutants)), ("failures", failures), ("errors", 0),
                       ("skipped", skipped)):
        suite.set(key, str(value))
    root = ET.Element("testsuites", name="kvconf")
    root.append(suite)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
