"""The configuration a run hands to an engine (validated at the boundary)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from kvconf.conformance.errors import KitError

MAX_PAGES = 1_000_000  # the largest pool a config may state


class EngineConfig(BaseModel):
    """Pool sizes and page size of the cache under test; small pools make pressure likely."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    page_size: int = Field(default=2, ge=1, le=64)
    device_pages: int = Field(default=24, ge=1, le=MAX_PAGES)
    host_pages: int = Field(default=24, ge=0, le=MAX_PAGES)


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
