"""The installed layout and the public API: one top-level name, the repository's folders mapped
under it, no import circles, and every public name documented (docs/api.md)."""

from __future__ import annotations

import ast
import re
import tomllib
import zipfile
from pathlib import Path

import networkx as nx
import pytest

import kvconf
import kvconf.cache
import kvconf.scheduler
from kvconf.conformance.engine.features import ALLOWANCES, Feature
from kvconf.spec.registry import load_registry

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"kvconf": "kvconf", "kvconf.spec": "spec", "kvconf.reference": "reference",
           "kvconf.conformance": "conformance", "kvconf.gpu_harness": "gpu_harness"}
OLD_NAMES = ("spec", "reference", "conformance", "gpu_harness")


def setuptools_table() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


def modules() -> dict[str, Path]:
    """Every module of the distribution by its installed name."""
    out = {}
    for name, folder in FOLDERS.items():
        for f in sorted((ROOT / folder).rglob("*.py")):
            parts = list(f.relative_to(ROOT / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([name, *parts])] = f
    return out


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import in a file, lazy ones included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [(node.lineno, node.module)]
            out += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
    return out


def test_the_package_list_is_every_folder_mapped_under_kvconf() -> None:
    table = setuptools_table()
    assert table["package-dir"] == FOLDERS
    found = sorted(name for name, f in modules().items() if f.name == "__init__.py")
    assert sorted(table["packages"]) == found


def test_nothing_imports_the_folders_by_their_bare_names() -> None:
    """Installed, only ``kvconf`` exists: a bare ``import conformance`` would work in the
    repository and fail for every user."""
    files = [f for d in (*FOLDERS.values(), "tests", "benchmarks", "examples")
             for f in (ROOT / d).rglob("*.py")]
    bad = [f"{f.relative_to(ROOT)}:{line}: {mod}" for f in files for line, mod in imports(f)
           if mod.split(".")[0] in OLD_NAMES]
    assert not bad, bad


def test_no_module_imports_itself_back() -> None:
    """The module graph, lazy imports included, has no cycle: each layer imports only below."""
    mods = modules()
    g = nx.DiGraph()
    for name, f in mods.items():
        for _line, target in imports(f):
            if target in mods and target != name:
                g.add_edge(name, target)
    assert list(nx.simple_cycles(g)) == []


@pytest.mark.filterwarnings("ignore")  # setuptools' own notes on data folders, not ours
def test_the_wheel_holds_one_top_level_name(tmp_path: Path) -> None:
    setuptools = pytest.importorskip("setuptools.build_meta")
    import os

    here = os.getcwd()
    os.chdir(ROOT)
    try:
        wheel = setuptools.build_wheel(str(tmp_path))
    finally:
        os.chdir(here)
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"kvconf"}
    for need in ("kvconf/__init__.py", "kvconf/py.typed", "kvconf/spec/catalog.toml",
                 "kvconf/spec/registry/pinning.toml", "kvconf/conformance/running/worker.py",
                 "kvconf/conformance/adapters/expectations/vllm.toml"):
        assert need in names, need


def test_every_public_name_is_documented_and_explained() -> None:
    doc = (ROOT / "docs" / "api.md").read_text()
    for module in (kvconf, kvconf.cache, kvconf.scheduler):
        for name in module.__all__:
            assert hasattr(module, name), (module.__name__, name)
            assert f"`{name}" in doc, f"{module.__name__}.{name} is not in docs/api.md"
            obj = getattr(module, name)
            if isinstance(obj, type) or callable(obj):
                said = (obj.__doc__ or "").strip()  # a dataclass's made-up doc is its signature
                assert said and not said.startswith(f"{name}("), f"{name} says nothing of itself"
    # the generated protocol reference's tables name the public types' fields and methods
    names_table = re.sub(r"<!-- protocol reference:.*?<!-- end of the protocol reference -->",
                         "", doc, flags=re.S)
    documented = set(re.findall(r"^\| `(\w+)`", names_table, re.M))
    public = set(kvconf.__all__) | set(kvconf.cache.__all__) | set(kvconf.scheduler.__all__)
    features = {f.value for f in Feature}
    assert documented - public - features == set()


def test_each_allowance_is_a_rule_that_names_its_feature() -> None:
    rules = load_registry().behaviours
    doc = (ROOT / "docs" / "api.md").read_text()
    for feature, rule in ALLOWANCES.items():
        assert f"declares {feature.value}" in rules[rule].statement, (feature, rule)
        assert f"| `{feature.value}` | {rule} |" in doc
