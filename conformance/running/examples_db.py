"""Hypothesis's example database, shared by every worker of a run and by later runs.

A fuzz case that fails saves the choices that made it fail; the next run of the case replays
them first, so a failure found once (by any worker, any shard that shares the database) is
found again at once until it is fixed. The database is a folder by default
(``.kvconf/examples``); a shared one is a folder on a shared disk, or any Hypothesis
``ExampleDatabase`` named as ``module:attr`` (an instance, or a callable that returns one).
Each case sees it through its own key prefix, so two cases never replay each other's examples.
"""

from __future__ import annotations

from importlib import import_module
from pathlib import Path

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase

from kvconf.conformance.errors import KitError

DEFAULT = ".kvconf/examples"
NONE = ("none", "off", "")


def open_database(spec: str | None) -> ExampleDatabase | None:
    """The database ``spec`` names: None or "none" for none, ``module:attr``, or a folder."""
    if spec is None or spec.strip().lower() in NONE:
        return None
    if ":" in spec and not Path(spec).exists():
        module, _, attr = spec.partition(":")
        try:
            target = getattr(import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise KitError(f"--examples-db {spec}: cannot load {attr!r} from {module!r} ({e})"
                           ) from None
        db = target() if callable(target) and not isinstance(target, ExampleDatabase) else target
        if not isinstance(db, ExampleDatabase):
            raise KitError(f"--examples-db {spec}: {type(db).__name__} is not a Hypothesis "
                           "ExampleDatabase")
        return db
    path = Path(spec)
    if path.exists() and not path.is_dir():
        raise KitError(f"--examples-db {spec}: exists and is not a folder")
    return DirectoryBasedExampleDatabase(str(path))


class CaseKeyed(ExampleDatabase):
    """One case's view of a shared database: its keys carry the case's name."""

    def __init__(self, db: ExampleDatabase, case: str) -> None:
        super().__init__()
        self.db = db
        self.prefix = f"kvconf:{case}:".encode()

    def save(self, key: bytes, value: bytes) -> None:
        self.db.save(self.prefix + key, value)

    def fetch(self, key: bytes):
        return self.db.fetch(self.prefix + key)

    def delete(self, key: bytes, value: bytes) -> None:
        self.db.delete(self.prefix + key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self.db.move(self.prefix + src, self.prefix + dest, value)


def keyed(db: ExampleDatabase, case: str) -> ExampleDatabase:
    return CaseKeyed(db, case)
