"""The host-tier calls of a prefix cache that has no host tier: every transfer is declined."""

from __future__ import annotations

from typing import Any, ClassVar

from kvconf.conformance.engine.protocol import CopyOp
from kvconf.conformance.errors import EngineRejected


class DeviceOnly:
    """Mixed into adapters whose engine keeps KV on device only (no ``host_tier`` feature)."""

    engine_label: ClassVar[str] = "this engine"

    def start_writeback(self, node: Any) -> CopyOp | None:
        return None

    def start_loadback(self, node: Any) -> CopyOp | None:
        return None

    def finish_transfer(self, op_id: Any, success: bool) -> None:
        raise EngineRejected("no_transfer", f"{self.engine_label} has no host tier")
