"""The one error type the reference raises for a request it rejects (spec FAULT-1)."""


class CacheError(Exception):
    """A rejected operation. ``code`` is stable and machine-readable; state is left unchanged."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
