"""The configuration a run hands to an engine (validated at the boundary)."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvconf.conformance.errors import KitError

MAX_PAGES = 1_000_000  # the largest pool a config may state


class EngineConfig(BaseModel):
    """Pool sizes and page size of the cache under test; small pools make pressure likely."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    page_size: int = Field(default=2, ge=1, le=64)
    device_pages: int = Field(default=24, ge=1, le=MAX_PAGES)
    host_pages: int = Field(default=24, ge=0, le=MAX_PAGES)


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
