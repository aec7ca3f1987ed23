"""Source paths as a report shows them: relative to where Python imports them from, so a report
says ``kvconf/conformance/adapters/tokenspeed.py`` or ``hypothesis/core.py``, never where the
machine that ran it keeps its checkout or its virtual environment.

A path inside an imported package becomes the package's dotted name as a path (the kit's own
modules are ``kvconf/...`` wherever its folders lie); one inside an import root (a ``sys.path``
entry, site-packages) becomes relative to it; one under the current directory relative to it.
The most specific (longest) of these wins. A path under none is left as it is.
"""

from __future__ import annotations

import os
import re
import site
import sys

# An absolute path in a traceback (``File "/a/b.py", line 3``), faulthandler's stacks
# (``File "/a/b.py", line 3 in f``) or a warning (``/a/b.py:3: UserWarning``).
_PATH = re.compile(r"(?<![\w./~-])/[^\s\"'<>:,()]+")
_PACKAGES = re.compile(r"^.*/(?:site|dist)-packages/")


def _roots() -> list[tuple[str, str]]:
    """(folder with a trailing slash, what it becomes), the longest folder first."""
    roots: dict[str, str] = {}

    def add(folder: str, as_: str) -> None:
        for f in {os.path.abspath(folder), os.path.realpath(folder)}:
            if f != os.sep:
                roots.setdefault(f.rstrip(os.sep) + os.sep, as_)

    for name, mod in list(sys.modules.items()):  # packages: their folder is their name
        file = getattr(mod, "__file__", None)
        if file and os.path.basename(file).startswith("__init__.") and name != "__main__":
            add(os.path.dirname(file), name.replace(".", "/") + "/")
    for folder in [*sys.path, *site.getsitepackages(), site.getusersitepackages()]:
        if folder and os.path.isabs(folder):
            add(folder, "")
    add(os.getcwd(), "")
    return sorted(roots.items(), key=lambda r: -len(r[0]))


def relative_paths(text: str) -> str:
    """``text`` with every absolute source path in it made relative (module docstring)."""
    if not text or "/" not in text:
        return text
    roots = _roots()

    def one(m: re.Match[str]) -> str:
        path = m.group(0)
        for folder, as_ in roots:
            if path.startswith(folder):
                return as_ + path[len(folder):]
        return _PACKAGES.sub("", path)

    return _PATH.sub(one, text)
