"""The configuration a run hands to an engine (validated at the boundary)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvconf.conformance.errors import KitError

MAX_PAGES = 1_000_000  # the largest pool a config may state
# A run's cost grows with its pools: every engine a trace builds (two per trace, DET-1) sets up
# each pool's pages, whatever the trace then uses. Measured on the reference, fuzz-cache and
# lru-victim-order at --profile ci in one process: 2.4 s and 50 MB at the default 24 device
# pages, 5.5 s and 64 MB at 10,000, 42 s and 200 MB at 100,000, 417 s and 1.67 GB at 1,000,000
# (about 0.4 ms per page per two cases). Past WARN_PAGES (about four times the default's cost)
# a run says so; past FORCE_PAGES (about 35 times, and growing with every page) it needs --force.
WARN_PAGES = 20_000
FORCE_PAGES = 200_000
_POOL = {"warn_above": WARN_PAGES, "force_above": FORCE_PAGES}
_POOL_COST = (f"; past {WARN_PAGES:,} pages a run warns of its cost, past {FORCE_PAGES:,} it "
              "needs --force (each engine a trace builds sets up every page)")


class EngineConfig(BaseModel):
    """Pool sizes and page size of the cache under test; small pools make pressure likely.
    Each field's bounds live with it: its range, and (``json_schema_extra``) the values past
    which a run warns of its cost (``warn_above``) or is refused without --force
    (``force_above``; ``cost_warning``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    page_size: int = Field(default=2, ge=1, le=64, description="tokens per page")
    device_pages: int = Field(default=24, ge=1, le=MAX_PAGES, json_schema_extra=_POOL,
                              description="pages of the device pool" + _POOL_COST)
    host_pages: int = Field(default=24, ge=0, le=MAX_PAGES, json_schema_extra=_POOL,
                            description="pages of the host pool (0: no host tier)"
                            + _POOL_COST)


def cost_warning(config: EngineConfig, force: bool = False) -> str | None:
    """The one line a configuration far dearer than the default earns, naming the field, its
    value and the default (None when every field is within its ``warn_above``); a field past
    its ``force_above`` is a KitError unless ``force``."""
    lines = []
    for name, info in EngineConfig.model_fields.items():
        bounds = info.json_schema_extra or {}
        value = getattr(config, name)
        if "force_above" in bounds and value > bounds["force_above"] and not force:
            raise KitError(f"--config {name}={value}: past {bounds['force_above']:,} (the "
                           f"default is {info.default}) a run can take hours and gigabytes "
                           "for what the default size judges in seconds; give --force to run "
                           "it anyway")
        if "warn_above" in bounds and value > bounds["warn_above"]:
            lines.append(f"{name}={value} (default {info.default})")
    if not lines:
        return None
    return (f"warning: --config {', '.join(lines)}: past {WARN_PAGES:,} pages each engine a "
            "trace builds sets up every page, so this run can take far longer and more memory "
            "than at the default size")


@dataclass(frozen=True, slots=True)
class Requires:
    """The least engine configuration a case is written for, declared next to the case.

    A hand-written scenario plays fixed steps whose expected results assume its pages fit at
    once (no eviction it did not ask for); under a smaller config the same steps would judge
    the pool, not the rule. Below these minimums the runner reports the case NOT_APPLICABLE
    with the reason, before it runs: decided from the config alone, never from an outcome, so
    it cannot hide an engine's failure (spec chapter faults, "Statuses of a run")."""

    page_size: int = 1
    device_pages: int = 1
    host_pages: int = 0

    def unmet(self, config: EngineConfig) -> list[str]:
        """What ``config`` lacks, one phrase per field, in field order (empty: it applies)."""
        out = []
        for name in ("page_size", "device_pages", "host_pages"):
            need, have = getattr(self, name), getattr(config, name)
            if have < need:
                out.append(f"{name} >= {need} (this run has {have})")
        return out

    def reason(self, config: EngineConfig) -> str | None:
        """The NOT_APPLICABLE message for ``config``, or None when the case applies."""
        unmet = self.unmet(config)
        if not unmet:
            return None
        return "not applicable at this config: needs " + ", ".join(unmet)


def parse_overrides(base: EngineConfig, items: list[str]) -> EngineConfig:
    """Apply ``key=value`` overrides (the CLI's ``--config``), naming the bad field on error."""
    data = base.model_dump()
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise KitError(f"--config {item!r}: expected key=value")
        if key not in data:
            raise KitError(f"--config {key}: unknown field (fields: {', '.join(data)})")
        data[key] = value
    try:
        return EngineConfig.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        field = ".".join(str(p) for p in first["loc"])
        raise KitError(f"config.{field}: {first['msg']} (got {first.get('input')!r})") from None
