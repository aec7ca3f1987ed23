"""`kvconf spec audit`: the registry checked against the chapters, the oracles and the tests.

Gaps it reports: a behaviour with no oracle or no test citing it, an oracle or test citing an ID
that does not exist, a behaviour missing from (or repeated in) its chapter, a chapter marker for an
unknown ID, a catalog defect no mutant (``kvconf.conformance.mutants``) plants, a mutant that names no
catalog defect or an unknown ID. Catalog IDs no behaviour guards yet are listed with an empty
list, not as gaps, so the audit shows how much of the catalog is covered while later work fills
it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

from kvconf.spec.registry import Registry

MARKER = re.compile(r"""\{\{\s*behaviour\(\s*["']([A-Z][A-Z0-9]*-[0-9]+)["']\s*\)\s*\}\}""")


@dataclass
class AuditResult:
    behaviours: int
    catalog: dict[str, list[str]]
    gaps: list[str] = field(default_factory=list)
    oracles: dict[str, list[str]] = field(default_factory=dict)  # behaviour -> oracle names
    tests: dict[str, list[str]] = field(default_factory=dict)  # behaviour -> test locations
    mutants: dict[str, list[str]] = field(default_factory=dict)  # catalog id -> mutant names

    def as_json(self) -> dict:
        return {"behaviours": self.behaviours, "catalog": self.catalog, "gaps": self.gaps,
                "mutants": self.mutants}


def test_citations(tests_dir: Path) -> dict[str, list[str]]:
    """IDs cited by ``pytest.mark.behaviours("ID", ...)`` anywhere under ``tests_dir``."""
    cited: dict[str, list[str]] = {}
    for path in sorted(tests_dir.rglob("test_*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except (SyntaxError, UnicodeDecodeError) as e:
            line = getattr(e, "lineno", None)
            cited.setdefault("<unreadable>", []).append(
                f"{path.name}:{line}: cannot parse ({type(e).__name__})")
            continue
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            f = node.func
            if isinstance(f, ast.Attribute) and f.attr == "behaviours":
                for arg in node.args:
                    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                        cited.setdefault(arg.value, []).append(f"{path.name}:{node.lineno}")
    return cited


def oracle_citations() -> dict[str, list[str]]:
    from kvconf.conformance.oracles import ALL_ORACLES

    cited: dict[str, list[str]] = {}
    for oracle in ALL_ORACLES:
        for bid in oracle.behaviours:
            cited.setdefault(bid, []).append(oracle.name)
    return cited


def mutant_citations(registry: Registry) -> tuple[dict[str, list[str]], list[str]]:
    """Catalog id -> the mutants that plant it; and the gaps: a defect no mutant plants, a
    mutant that names no catalog defect, or an ID that is neither a behaviour nor a defect."""
    from kvconf.conformance.mutants import all_mutants

    by: dict[str, list[str]] = {d: [] for d in registry.catalog}
    gaps: list[str] = []
    for m in all_mutants():
        unknown = [i for i in m.ids if i not in registry.catalog and i not in registry.behaviours]
        if unknown:
            gaps.append(f"mutant {m.name} names unknown IDs {', '.join(unknown)}")
        cat = m.cites(registry.catalog)
        if not cat:
            gaps.append(f"mutant {m.name} names no catalog defect")
        for d in cat:
            by[d].append(m.name)
    gaps.extend(f"{d}: no mutant plants it" for d, names in by.items() if not names)
    return by, gaps


def audit(registry: Registry, tests_dir: Path | None) -> AuditResult:
    res = AuditResult(behaviours=len(registry.behaviours), catalog=registry.guarded_by())
    known = registry.behaviours
    res.mutants, mutant_gaps = mutant_citations(registry)
    res.gaps.extend(mutant_gaps)
    res.oracles = oracle_citations()
    for bid, names in sorted(res.oracles.items()):
        if bid not in known:
            res.gaps.append(f"oracle {', '.join(names)} cites unknown behaviour {bid}")
    if tests_dir is None or not tests_dir.is_dir():
        res.gaps.append(f"tests directory not found ({tests_dir}); run from a source checkout")
    else:
        res.tests = test_citations(tests_dir)
        for where in res.tests.pop("<unreadable>", []):
            res.gaps.append(f"test file {where}: its markers could not be read")
        for bid, where in sorted(res.tests.items()):
            if bid not in known:
                res.gaps.append(f"test {where[0]} cites unknown behaviour {bid}")
    for bid in known:
        if bid not in res.oracles:
            res.gaps.append(f"{bid}: no oracle cites it")
        if tests_dir is not None and tests_dir.is_dir() and bid not in res.tests:
            res.gaps.append(f"{bid}: no test cites it")
    for chapter, path in sorted(registry.chapters.items()):
        if not path.is_file():
            res.gaps.append(f"chapter {chapter}: {path.name} is missing")
            continue
        text = path.read_text(encoding="utf-8")
        ids = MARKER.findall(text)
        for bid in ids:
            if bid not in known:
                res.gaps.append(f"{path.name}: marker for unknown behaviour {bid}")
            elif known[bid].chapter != chapter:
                res.gaps.append(f"{path.name}: {bid} belongs to chapter {known[bid].chapter}")
        for b in known.values():
            if b.chapter == chapter and ids.count(b.id) != 1:
                res.gaps.append(
                    f"{path.name}: {b.id} appears {ids.count(b.id)} times (expected exactly once)"
                )
    return res
