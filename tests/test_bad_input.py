"""Bad input and safety (issue 20): every bad file or path is one line on stderr and exit code
2, never a traceback, and writing a report never replaces something that is not a file."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.cli import app
from kvconf.conformance.errors import KitError
from kvconf.conformance.trace import write_atomic

runner = CliRunner()
ONE_CASE = ("--case", "lru-victim-order", "--quiet")


def kvconf(*args: str):
    return runner.invoke(app, list(args))


def one_line_error(r, *needles: str) -> str:
    """The run stopped with exit 2 and one line that names every needle, no traceback."""
    assert r.exit_code == 2, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("kvconf: error: "), r.output
    assert "Traceback" not in r.output
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


# -- 1. a report never replaces what is not a regular file ---------------------------------


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_a_character_device_is_refused_and_kept() -> None:
    one_line_error(kvconf("run", *ONE_CASE, "--report", "/dev/full"), "character device")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_fifo_is_refused_and_kept(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    one_line_error(kvconf("run", *ONE_CASE, "--report", str(fifo)), "a FIFO")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(KitError, match="a FIFO"):
        write_atomic(fifo, "x")
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_symlink_keeps_being_a_symlink_and_its_target_is_written(tmp_path: Path) -> None:
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    r = kvconf("run", *ONE_CASE, "--report", str(link))
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert json.loads(real.read_text())["results"][0]["case"] == "lru-victim-order"


def test_a_symlink_to_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.json"
    link.symlink_to(fifo)
    one_line_error(kvconf("run", *ONE_CASE, "--report", str(link)), "symlink", "FIFO")
    assert link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_report_follows_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o027)
    try:
        path = write_atomic(tmp_path / "new.json", "{}\n")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # not mkstemp's 0600


def test_a_replaced_report_keeps_its_mode(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text("old")
    path.chmod(0o644)
    write_atomic(path, "new")
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o644


def test_an_interrupt_inside_an_atomic_write_leaves_no_half_file(tmp_path: Path,
                                                                  monkeypatch) -> None:
    """Ctrl-C landing in ``mkstemp`` after it made the file but before it handed the name back
    (the last moment it could): the write completes, the interrupt comes just after it, and no
    temporary file is left beside the report."""
    import signal
    import tempfile

    real = tempfile.mkstemp

    def interrupted_mkstemp(*args, **kwargs):
        made = real(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)
        return made

    monkeypatch.setattr(tempfile, "mkstemp", interrupted_mkstemp)
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


# -- 2. unwritable places -------------------------------------------------------------------


def test_a_report_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    one_line_error(kvconf("run", *ONE_CASE, "--report", str(tmp_path / "file" / "r.json")),
                   "ot a directory")
    with pytest.raises(KitError, match="cannot write"):
        write_atomic(tmp_path / "file" / "r.json", "x")


def test_an_unwritable_report_folder_is_refused(tmp_path: Path, monkeypatch) -> None:
    """Permission bits do not stop root, so the check itself is what is tested."""
    folder = tmp_path / "ro"
    folder.mkdir()
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != folder)
    one_line_error(kvconf("run", *ONE_CASE, "--report", str(folder / "r.json")),
                   "permission denied")
    one_line_error(kvconf("report", str(folder / "x.json"), "--out", str(folder / "site")),
                   "permission denied")


def test_a_compliance_or_site_folder_under_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    one_line_error(kvconf("report", str(tmp_path / "r.json"), "--out",
                          str(tmp_path / "file" / "out")), "is not a folder")
    one_line_error(kvconf("docs", "build", "--out", str(tmp_path / "file" / "site")),
                   "is not a folder")


# -- 2. malformed traces, reports and expectation files --------------------------------------


def _trace(tmp_path: Path, text: str | bytes) -> str:
    path = tmp_path / "t.json"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(path)


@pytest.mark.parametrize("text, needles", [
    (b'{"steps": [\xff]}', ("t.json:1:", "not UTF-8")),
    ('{"steps": [{"op": "evict", "pages": ' + "9" * 5000 + "}]}", ("digits",)),
    ('{"steps": ' + "[" * 100_000 + "]" * 100_000 + "}", ("nested too deeply",)),
    ('{"config": {}}', ("t.json:1:", "steps: missing")),
    ('{\n"steps": [\n{"op": "evict",\n "pages": true}]}', ("t.json:4:", "steps[0].pages")),
    ('{"steps": [{"op": "match", "tokens": [1.0]}]}', ("steps[0].tokens[0]",)),
    ('{"steps": [{"op": "evict", "pages": 99999999999999}]}', ("steps[0].pages",
                                                               "less than or equal")),
    ('{"level": "rack", "steps": []}', ("t.json:1:", "cache, scheduler or hybrid")),
    ('[1, 2]', ("a trace is a JSON object",)),
    ('{\n"config": {\n"page_size": 0},\n"steps": []}', ("t.json:3:", "config.page_size")),
    ('{\n"level": "scheduler",\n"arrivals": [\n{"at": 0,\n"rid": "a", "ns": 0, "tokens": [1],'
     '\n"new_tokens": "2"}]}', ("t.json:6:", "arrivals[0].new_tokens")),
])
def test_a_malformed_trace_is_one_line(tmp_path: Path, text: str | bytes,
                                       needles: tuple[str, ...]) -> None:
    one_line_error(kvconf("replay", _trace(tmp_path, text), "--in-process"), *needles)


def test_a_bad_report_is_one_line_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "r.json"
    bad.write_text('{"format": "kvconf-report/2",\n"run_info": {\n"engine": 3}}')
    one_line_error(kvconf("report", str(bad), "--out", str(tmp_path / "c")),
                   "r.json:3:", "run_info.engine")
    one_line_error(kvconf("merge", str(bad), "--report", str(tmp_path / "m.json")),
                   "r.json:3:", "run_info.engine")
    bad.write_bytes(b'{"format":\n "\xfe"}')
    one_line_error(kvconf("report", str(bad), "--out", str(tmp_path / "c")),
                   "r.json:2:", "not UTF-8")
    one_line_error(kvconf("merge", str(bad)), "not UTF-8")


KNOWN = """engine = "reference"

[[known]]
case = "lru-victim-order"
status = "FAIL"
reason = "x"
reference = "owner/repo#1"
"""


@pytest.mark.parametrize("text, needles", [
    (KNOWN.replace('"FAIL"', '"MAYBE"'), ("e.toml:5:", "known[0].status")),
    (KNOWN.replace('"owner/repo#1"', '"somewhere"'), ("e.toml:7:", "known[0].reference")),
    (KNOWN + KNOWN.split("\n", 1)[1], ("e.toml:10:", "listed twice")),
    (KNOWN.encode().replace(b"x", b"\xff"), ("e.toml:6:", "not UTF-8")),
])
def test_a_bad_expectation_file_is_one_line_with_its_line(
        tmp_path: Path, text: str | bytes, needles: tuple[str, ...]) -> None:
    path = tmp_path / "e.toml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    one_line_error(kvconf("run", *ONE_CASE, "--expect", str(path), "--report",
                          str(tmp_path / "r.json")), *needles)


# -- 3. expectation files against the selection, budgets -------------------------------------


def test_an_unknown_case_in_an_expectation_file_stops_before_the_run(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text(KNOWN.replace('"lru-victim-order"', '"lru-victim-ordre"'))
    report = tmp_path / "r.json"
    one_line_error(kvconf("run", *ONE_CASE, "--expect", str(path), "--report", str(report)),
                   "e.toml:4:", "lru-victim-ordre is not a case")
    assert not report.exists()  # nothing ran


def test_an_expectation_file_for_another_engine_stops_before_the_run(tmp_path: Path) -> None:
    path = tmp_path / "e.toml"
    path.write_text(KNOWN.replace('"reference"', '"vllm"'))
    report = tmp_path / "r.json"
    one_line_error(kvconf("run", *ONE_CASE, "--expect", str(path), "--report", str(report)),
                   "the file is for vllm")
    assert not report.exists()


def test_an_expectation_file_works_with_a_case_subset(tmp_path: Path) -> None:
    """The file knows a failure of a case not selected: ignored, not reported missing."""
    path = tmp_path / "e.toml"
    path.write_text(KNOWN.replace('"lru-victim-order"', '"pinned-never-evicted"'))
    r = kvconf("run", *ONE_CASE, "--expect", str(path), "--report", str(tmp_path / "r.json"))
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "r.json").read_text())
    assert [x["expectation"] for x in data["results"]] == ["expected"]


@pytest.mark.parametrize("text, seconds, examples", [
    ("90s", 90, None), ("5m", 300, None), ("1h", 3600, None), ("1.5h", 5400, None),
    ("200", None, 200), ("7 examples", None, 7),
])
def test_a_budget_takes_durations(text: str, seconds: float | None, examples: int | None) -> None:
    from kvconf.conformance.running.profiles import get_profile, parse_budget

    b = parse_budget(text, get_profile("ci"))
    assert (b.seconds, b.examples) == (seconds, examples)


@pytest.mark.parametrize("text, needle", [
    ("0", "more than zero"), ("0s", "more than zero"), ("-5", "expected a number"),
    ("-1m", "expected a number"), ("169h", "more than a week"), ("99999999999", "more than"),
    ("soon", "expected a number"), ("5d", "expected a number"), ("1.5", "whole number"),
])
def test_an_absurd_budget_is_one_line(tmp_path: Path, text: str, needle: str) -> None:
    one_line_error(kvconf("run", *ONE_CASE, "--budget", text, "--report",
                          str(tmp_path / "r.json")), "--budget", needle)


# -- 5. an engine that returns the wrong type ------------------------------------------------


def match_returns_none(config):
    """The reference, except that a cache-level ``match`` returns None."""
    from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter

    engine = ReferenceCacheAdapter(config)
    engine.match = lambda namespace, tokens: None
    return engine


def test_a_wrong_return_type_is_one_clear_failure(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    r = kvconf("run", "--engine", f"{__name__}:match_returns_none", "--case", "lru-victim-order",
               "--quiet", "--report", str(report))
    assert r.exit_code == 1, r.output
    (res,) = json.loads(report.read_text())["results"]
    assert res["status"] == "FAIL" and res["behaviours"] == ["FAULT-4"]
    assert "match at step" in res["message"] and "returned NoneType" in res["message"]
    assert "expects Match" in res["message"] and res["step"] is not None
    assert "AttributeError" not in res["message"]


# -- 6. one run per report path; no stale traces ---------------------------------------------


def test_a_second_run_on_the_same_report_is_refused(tmp_path: Path) -> None:
    from kvconf.conformance.reporting.report import report_lock

    report = tmp_path / "r.json"
    with report_lock(report):
        one_line_error(kvconf("run", *ONE_CASE, "--report", str(report)),
                       "another kvconf run", str(os.getpid()))
        with pytest.raises(KitError, match="another kvconf run"), report_lock(report):
            pass
    assert not report.exists()
    r = kvconf("run", *ONE_CASE, "--report", str(report))  # released: runs
    assert r.exit_code == 0, r.output
    assert not (tmp_path / ".r.json.lock").exists()


def test_a_stale_trace_of_an_earlier_run_is_cleared(tmp_path: Path) -> None:
    stale = tmp_path / "traces" / "lru-victim-order.json"
    stale.parent.mkdir()
    stale.write_text("{}")
    other = tmp_path / "traces" / "mine.json"  # not a trace of the cases run: kept
    other.write_text("{}")
    r = kvconf("run", *ONE_CASE, "--report", str(tmp_path / "r.json"))
    assert r.exit_code == 0, r.output
    assert not stale.exists() and other.exists()


def test_kvconf_version_prints_the_version() -> None:
    from typer.testing import CliRunner

    from kvconf.conformance import __version__
    from kvconf.conformance.cli import app

    res = CliRunner().invoke(app, ["--version"])
    assert res.exit_code == 0 and res.output.strip() == f"kvconf {__version__}"
