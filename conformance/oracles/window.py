"""WIN-1: the window an engine derives from a model config is the one the config states; an
engine declaring config_class_window is judged by its architecture's config class (WIN-5)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvconf.conformance.engine.features import Feature
from kvconf.conformance.oracles.base import Oracle
from kvconf.reference.window import window_by_config_class


class WindowConfigOracle(Oracle):
    """Compares the engine's reading of Hugging Face style configs with the spec's (D381-6)."""

    name = "window-config"
    behaviours = ("WIN-1", "WIN-5")
    needs = frozenset({Feature.SLIDING_WINDOW, Feature.MODEL_CONFIG})

    def check(self, name: str, cfg: Mapping[str, Any], got: int | None,
              refused: str | None, want: int | None) -> None:
        """``want`` None: the config contradicts itself and must be refused."""
        if Feature.CONFIG_CLASS_WINDOW in self.declared:
            return self._check_by_class(name, cfg, got, refused)
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

    def __init__(self, declared: frozenset[Feature] = frozenset()) -> None:
        self.declared = declared  # the engine's features: config_class_window judges by WIN-5

    def _check_by_class(self, name: str, cfg: Mapping[str, Any], got: int | None,
                        refused: str | None) -> None:
        """WIN-5: the level the config class reads (the nested text config where there is one)
        gives the window; where it leaves the size unsaid the class's default is taken, which
        the kit cannot know: any reading is accepted there, but a window (positive) where the
        switch is on."""
        want, positive = window_by_config_class(cfg)
        said = f"model config {name} ({dict(cfg)})"
        if refused is not None:
            raise self.fail(("WIN-1", "WIN-5"), f"{said} is read by its config class (WIN-5), "
                            f"but the engine refused it: {refused}")
        if want is not None and got != want:
            raise self.fail(("WIN-1", "WIN-5"), f"{said} states window {want} at the level its "
                            f"config class reads (WIN-5), the engine read {got}")
        if want is None and positive and not (isinstance(got, int) and got > 0):
            raise self.fail(("WIN-1", "WIN-5"), f"{said} switches the window on with no size, "
                            f"so the config class's default window is taken (WIN-5), but the "
                            f"engine read {got}")
        if want is None and not (isinstance(got, int) and not isinstance(got, bool) and got >= 0):
            raise self.fail(("WIN-1", "WIN-5"), f"{said}: the engine read {got!r}, not a window "
                            "size")
