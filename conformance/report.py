"""The run report: machine-readable JSON (pydantic), written atomically."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from conformance.errors import KitError
from conformance.trace import write_atomic

FORMAT = "kvconf-report/1"


class Status(str, Enum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_SUPPORTED = "NOT_SUPPORTED"
    ERROR = "ERROR"
    TIMEOUT = "TIMEOUT"


class CaseResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case: str
    status: Status
    behaviours: list[str]
    message: str = ""
    duration_s: float
    trace: str | None = None  # saved trace of a failure, relative to the report
    oracle: str | None = None
    step: int | None = None
    examples: int | None = None  # generated examples (fuzz cases)
    steps: int | None = None  # steps played (of a failure: of the shrunk trace)
    found_steps: int | None = None  # a fuzz failure's steps before shrinking
    expectation: str | None = None  # with an expectation file: expected/regression/improvement
    known: str | None = None  # the expectation file's reason and reference for this case


class RunInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engine: str
    version: str
    kvconf: str
    features: list[str]
    config: dict
    seed: int
    profile: str
    budget: str
    started: str
    finished: str | None = None
    interrupted: bool = False
    coverage: dict | None = None  # request state machine pairs exercised (scheduler level)
    memory: dict | None = None  # the KV memory the runtime used, when not the kit's own dict
    expectations: dict | None = None  # the expectation file and the cases per verdict


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid")

    format: str = FORMAT
    run_info: RunInfo
    results: list[CaseResult] = []
    summary: dict[Status, int] = {}

    def summarize(self) -> Report:
        self.summary = {s: sum(r.status is s for r in self.results) for s in Status}
        return self

    @property
    def ok(self) -> bool:
        """Every case passed or was not supported; with an expectation file, every case ended
        as the file expects (a known failure that now passes is a difference too)."""
        if self.run_info.expectations is not None:
            return all(r.expectation == "expected" for r in self.results)
        bad = (Status.FAIL, Status.ERROR, Status.TIMEOUT)
        return not any(r.status in bad for r in self.results)


def write_report(report: Report, path: str | Path) -> Path:
    report.summarize()
    return write_atomic(path, report.model_dump_json(indent=2) + "\n")


def load_report(path: str | Path) -> Report:
    path = Path(path)
    try:
        return Report.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except OSError as e:
        raise KitError(f"{path}: cannot read report ({e.strerror})") from None
    except json.JSONDecodeError as e:
        raise KitError(f"{path}:{e.lineno}:{e.colno}: invalid JSON: {e.msg}") from None
    except ValidationError as e:
        first = e.errors()[0]
        raise KitError(f"{path}: {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def report_schema() -> dict:
    return Report.model_json_schema()
