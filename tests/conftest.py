"""Shared test setup: Hypothesis profiles and the import path for ``planted``.

``KVCONF_PROFILE`` picks the Hypothesis profile (default ``ci``):

* ``ci``: short and derandomized, so every push runs the same examples in a few seconds;
* ``default``: a longer local run;
* ``nightly``: thousands of examples of 80 steps, randomized, failures kept in a local database.

Tests that drive the kit's own fuzzer read their budget from the loaded profile
(``settings.default.max_examples`` and ``settings.default.stateful_step_count``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis.database import DirectoryBasedExampleDatabase

TESTS_DIR = Path(__file__).resolve().parent
if str(TESTS_DIR) not in sys.path:
    sys.path.insert(0, str(TESTS_DIR))  # so `from planted import PLANTED` works under any runner

_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large]

settings.register_profile(
    "ci",
    max_examples=40,
    stateful_step_count=25,
    deadline=None,
    database=None,
    derandomize=True,
    suppress_health_check=_QUIET,
    print_blob=True,
)
settings.register_profile(
    "default",
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=_QUIET,
    print_blob=True,
)
settings.register_profile(
    "nightly",
    max_examples=5000,
    stateful_step_count=80,
    deadline=None,
    database=DirectoryBasedExampleDatabase(str(TESTS_DIR.parent / ".hypothesis" / "kvconf")),
    suppress_health_check=_QUIET,
    print_blob=True,
)

PROFILE = os.environ.get("KVCONF_PROFILE", "ci")
if PROFILE not in ("ci", "default", "nightly"):
    raise RuntimeError(f"KVCONF_PROFILE={PROFILE!r}: unknown profile (known: ci, default, nightly)")
settings.load_profile(PROFILE)
