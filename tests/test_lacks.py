"""An engine says why it lacks a feature (its ``lacks``): the NOT_SUPPORTED cases that need it
carry that reason in the report, in this process and from a worker alike; a ``lacks`` that names
no feature, gives no reason, or names a feature the engine declares is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvconf.conformance.cli import app

ENGINE = '''
from kvconf.conformance.adapters.reference_cache import ReferenceCacheAdapter
from kvconf.conformance.engine.features import Feature


class NoHostTier(ReferenceCacheAdapter):
    features = ReferenceCacheAdapter.features - {Feature.HOST_TIER, Feature.UNLOAD}
    lacks = {"host_tier": "this cache lives on the device alone:   no host memory is set aside",
             Feature.UNLOAD: "adapters are never unloaded while the server runs"}


class Unknown(ReferenceCacheAdapter):
    lacks = {"teleport": "not a thing"}


class Mute(ReferenceCacheAdapter):
    features = ReferenceCacheAdapter.features - {Feature.HOST_TIER}
    lacks = {"host_tier": "  "}


class Both(ReferenceCacheAdapter):
    lacks = {"host_tier": "said twice"}
'''


@pytest.fixture
def engines(tmp_path: Path, monkeypatch) -> str:
    (tmp_path / "lacking_engines.py").write_text(ENGINE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # the worker processes import it too
    return "lacking_engines"


@pytest.mark.parametrize("jobs", ["0", "1"])
def test_not_supported_cases_give_the_engines_reason(tmp_path: Path, engines: str,
                                                     jobs: str) -> None:
    report = tmp_path / f"r{jobs}.json"
    res = CliRunner().invoke(app, [
        "run", "--engine", f"{engines}:NoHostTier", "--profile", "ci", "--budget", "2",
        "--quiet", "--jobs", jobs, "--case", "writeback-demote-loadback", "--case",
        "unload-adapter", "--case", "lru-victim-order", "--report", str(report)])
    assert res.exit_code == 0, res.output
    by = {r["case"]: r for r in json.loads(report.read_text())["results"]}
    assert by["lru-victim-order"]["status"] == "PASS"
    host, unload = by["writeback-demote-loadback"], by["unload-adapter"]
    assert host["status"] == unload["status"] == "NOT_SUPPORTED"
    assert host["message"] == ("engine lacks host_tier; host_tier: this cache lives on the "
                               "device alone: no host memory is set aside")
    assert unload["message"].endswith("unload: adapters are never unloaded while the server runs")


@pytest.mark.parametrize("name, says", [
    ("Unknown", "lacks names 'teleport', not a feature"),
    ("Mute", "lacks['host_tier'] must say why"),
    ("Both", "declares host_tier and says it lacks it"),
])
def test_a_bad_lacks_is_a_one_line_error(tmp_path: Path, engines: str, name: str,
                                         says: str) -> None:
    res = CliRunner().invoke(app, ["run", "--engine", f"{engines}:{name}", "--jobs", "0",
                                   "--case", "lru-victim-order", "--report",
                                   str(tmp_path / "r.json")])
    assert res.exit_code == 2 and says in res.output and "Traceback" not in res.output
