"""Memory tiers a cached page can live on."""

from enum import Enum


class Tier(str, Enum):
    """Device (accelerator) memory or host memory; L3 storage is not a page tier."""

    DEVICE = "device"
    HOST = "host"

    def __str__(self) -> str:
        return self.value
