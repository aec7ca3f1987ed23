"""WIN-1: the window an engine derives from a model config is the one the config states."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Oracle


class WindowConfigOracle(Oracle):
    """Compares the engine's reading of Hugging Face style configs with the spec's (D381-6)."""

    name = "window-config"
    behaviours = ("WIN-1",)
    needs = frozenset({Feature.SLIDING_WINDOW, Feature.MODEL_CONFIG})

    def check(self, name: str, cfg: Mapping[str, Any], got: int | None,
              refused: str | None, want: int | None) -> None:
        """``want`` None: the config contradicts itself and must be refused."""
        if want is None:
            if refused is None:
                raise self.fail("WIN-1", f"model config {name} ({dict(cfg)}) contradicts "
                                f"itself but the engine read window {got} from it")
            return
        if refused is not None:
            raise self.fail("WIN-1", f"model config {name} ({dict(cfg)}) states window {want} "
                            f"but the engine refused it: {refused}")
        if got != want:
            raise self.fail("WIN-1", f"model config {name} ({dict(cfg)}) states window {want}, "
                            f"the engine read {got}")
