"""Errors the kit reports to a person: one line, naming the place, exit code 2."""


class KitError(Exception):
    """Bad input to the kit (trace file, engine name, config value, report path)."""


class EngineRejected(Exception):
    """The engine refused a call with its documented error (FAULT-1); ``code`` is stable."""

    def __init__(self, code: str, message: str = "") -> None:
        super().__init__(f"{code}: {message}" if message else code)
        self.code = code


class EngineUnavailable(Exception):
    """The engine's package is not installed or cannot start here; its cases are NOT_SUPPORTED
    with this reason, never passed."""
