"""Stand-ins for packages a peer engine imports at module level but never calls at cache level.

SGLang's import chain reaches ``torchvision`` (whose PyPI wheel links CUDA) and ``datasets``;
neither is used by its prefix caches. Installing them would pull the CUDA stack, so when they
are missing the peer adapters install empty modules under those names before importing the
engine. A real installation of either always wins: nothing is stood in for a package present.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

STOOD_IN = ("torchvision", "datasets")


class _Anything:
    """What any attribute of a stand-in is: callable, subscriptable, usable as a base class."""

    def __init__(self, *_a: Any, **_k: Any) -> None: ...
    def __call__(self, *_a: Any, **_k: Any) -> _Anything:
        return _Anything()
    def __getattr__(self, _name: str) -> _Anything:
        return _Anything()
    def __getitem__(self, _key: Any) -> _Anything:
        return _Anything()
    def __mro_entries__(self, _bases: tuple) -> tuple[type, ...]:
        return (object,)


class _StandInModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, roots: frozenset[str]) -> None:
        self.roots = roots

    def find_spec(self, name: str, path: Any = None, target: Any = None):
        if name.split(".")[0] in self.roots:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _StandInModule(spec.name)

    def exec_module(self, module) -> None:
        module.__path__ = []
        module.__version__ = "0.0.0"  # version probes (transformers) parse it


def install() -> tuple[str, ...]:
    """Stand in for every missing package of ``STOOD_IN``; returns the names stood in."""
    if any(isinstance(f, _Finder) for f in sys.meta_path):
        return ()
    missing = frozenset(n for n in STOOD_IN if importlib.util.find_spec(n) is None)
    if missing:
        sys.meta_path.append(_Finder(missing))
    return tuple(sorted(missing))
