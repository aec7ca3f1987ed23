"""Memory tiers a cached page can live on."""

from enum import Enum

from kvconf.reference.errors import CacheError


class Tier(str, Enum):
    """Device (accelerator) memory or host memory; L3 storage is not a page tier."""

    DEVICE = "device"
    HOST = "host"

    def __str__(self) -> str:
        return self.value


def as_tier(value: Tier | str) -> Tier:
    """The Tier member for ``value``: code compares tiers by identity, so strings are converted
    once at the public boundary (a plain "device" would compare equal but not identical)."""
    if value.__class__ is Tier:  # the common case, without the enum's lookup
        return value
    try:
        return Tier(value)
    except ValueError:
        raise CacheError("bad_tier", f"unknown tier {value!r} (device or host)") from None


# The members as module constants, which the cache's hot paths read. On Python 3.11 a member
# read off its Enum class goes through ``EnumType.__getattr__``, several times the cost of a
# global, and the cache names a tier on every page move, pin and victim check.
DEVICE, HOST = Tier.DEVICE, Tier.HOST
