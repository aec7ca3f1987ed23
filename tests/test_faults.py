"""FAULT-2 as every driver reports it (``conformance/faults.py``): a refused legal call, an
exception of the engine and a value of the wrong type are one violation each, with the same
words at every level."""

from __future__ import annotations

import pytest

from kvconf.conformance.adapters.reference_hybrid import ReferenceHybridAdapter
from kvconf.conformance.engine.hybrid import HybridConfig
from kvconf.conformance.errors import EngineRejected
from kvconf.conformance.faults import call_legal, fits, wrong_return
from kvconf.conformance.hybrid.driver import HybridDriver
from kvconf.conformance.hybrid.trace import AdmitStep, ExtendStep, HitStep
from kvconf.conformance.violation import Violation


def _fault(fn, *args) -> Violation:
    with pytest.raises(Violation) as e:
        call_legal("call", fn, *args)
    assert (e.value.oracle, e.value.behaviours) == ("faults", ("FAULT-2",))
    return e.value


def _boom():
    raise RuntimeError("boom")


def _refuse():
    raise EngineRejected("bad_tokens", "refused")


@pytest.mark.behaviours("FAULT-2")
def test_a_legal_call_that_raises_or_is_refused_is_one_fault_2_keeping_its_cause():
    v = _fault(_boom)
    assert v.message == "call raised RuntimeError: boom"
    assert isinstance(v.__cause__, RuntimeError)  # the report's traceback is the engine's
    v = _fault(_refuse)
    assert v.message.startswith("call rejected a legal call: ")
    assert isinstance(v.__cause__, EngineRejected)
    assert call_legal("call", lambda x: x + 1, 1) == 2


def test_an_oracles_violation_passes_through_unchanged():
    mine = Violation("content", ("TREE-2",), "x")

    def hook():
        raise mine

    with pytest.raises(Violation) as e:
        call_legal("call", hook)
    assert e.value is mine


def test_types_and_the_wrong_return_message():
    assert fits(None, (int, None)) and not fits(None, (int,))
    assert fits(3, (int,)) and not fits(True, (int,))  # a bool is no count
    v = wrong_return("evict at step 4", "bool (True)", "conformance/engine/protocol.py",
                     (int,))
    assert v.message == ("evict at step 4 returned bool (True); the protocol "
                         "(conformance/engine/protocol.py) expects int")


class _WrongHit(ReferenceHybridAdapter):
    def hit(self, namespace, tokens):
        return {"length": 0}


class _RaisingExtend(ReferenceHybridAdapter):
    def extend(self, rid, upto):
        raise ValueError("no chunk today")


@pytest.mark.behaviours("FAULT-2", "FAULT-4")
@pytest.mark.parametrize(("cls", "steps", "rule", "message"), [
    (_WrongHit, [HitStep(tokens=[1, 2])], "FAULT-4",
     "hit returned dict ({'length': 0}); the protocol (conformance/engine/hybrid.py) expects "
     "HybridHit"),
    (_RaisingExtend, [AdmitStep(rid="r", tokens=[1, 2]), ExtendStep(rid="r", upto=2)], "FAULT-2",
     "extend raised ValueError: no chunk today"),
])
def test_the_hybrid_driver_reports_faults_in_the_same_words(cls, steps, rule, message):
    driver = HybridDriver(cls(HybridConfig(page_size=1)))
    with pytest.raises(Violation) as e:
        for i, step in enumerate(steps):
            driver.step(i, step)
    assert (e.value.oracle, e.value.behaviours, e.value.message) == (
        "faults", (rule,), message)
    assert e.value.step == len(steps) - 1
