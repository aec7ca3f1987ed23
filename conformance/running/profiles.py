"""Fuzzing profiles: how much the generators explore per run.

``ci`` is short enough for every push; ``nightly`` is for long opt-in campaigns. The test suite
reads ``KVCONF_PROFILE`` (default ``ci``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from kvconf.conformance.errors import KitError


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    examples: int  # generated traces per fuzz case
    steps: int  # steps per generated trace
    shrink_replays: int = 600  # replays the shrinker may spend on a failing trace


PROFILES = {
    "ci": Profile("ci", examples=60, steps=30),
    "default": Profile("default", examples=300, steps=40),
    "nightly": Profile("nightly", examples=5000, steps=80, shrink_replays=5000),
}


def get_profile(name: str | None = None) -> Profile:
    name = name or os.environ.get("KVCONF_PROFILE", "default")
    if name not in PROFILES:
        raise KitError(f"--profile {name}: unknown profile (known: {', '.join(PROFILES)})")
    return PROFILES[name]


@dataclass(frozen=True, slots=True)
class Budget:
    """Either a number of generated examples per fuzz case or seconds per fuzz case."""

    examples: int | None = None
    seconds: float | None = None

    def __str__(self) -> str:
        return f"{self.seconds:g}s" if self.seconds is not None else f"{self.examples} examples"


UNITS = {"s": 1, "m": 60, "h": 3600}
MAX_SECONDS = 7 * 24 * 3600  # a week per fuzz case: beyond is a typo, not a campaign
MAX_EXAMPLES = 100_000_000


def parse_budget(text: str | None, profile: Profile) -> Budget:
    """``--budget``: a whole number of examples (``200``) or a duration (``90s``, ``5m``,
    ``1h``, ``1.5h``); zero, negative, past a week or anything else is a one-line KitError."""
    if text is None:
        return Budget(examples=profile.examples)
    usage = ("expected a number of examples (200) or a duration (90s, 5m, 1h) of at most "
             "a week")
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h|examples)?\s*", text)
    if not m:
        raise KitError(f"--budget {text!r}: {usage}")
    amount, unit = float(m.group(1)), m.group(2)
    if amount <= 0:
        raise KitError(f"--budget {text!r}: must be more than zero")
    if unit in UNITS:
        seconds = amount * UNITS[unit]
        if seconds > MAX_SECONDS:
            raise KitError(f"--budget {text!r}: more than a week per fuzz case")
        return Budget(seconds=seconds)
    if "." in m.group(1):
        raise KitError(f"--budget {text!r}: a number of examples is a whole number")
    if amount > MAX_EXAMPLES:
        raise KitError(f"--budget {text!r}: more than {MAX_EXAMPLES} examples per fuzz case")
    return Budget(examples=int(amount))
