"""A model's sliding window, from a Hugging Face style model config (spec chapter windows, WIN-1).

Checkpoints put the window in different places: ``sliding_window`` at the top level, or inside a
nested ``text_config`` (multimodal and hybrid checkpoints), with ``use_sliding_window`` as an
explicit switch in some families. A scheduler that reads only the top level publishes a windowed
model's prefixes as if it had full attention (D381-6), so both places are read and must agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvconf.reference.errors import CacheError

NESTED = ("text_config",)


def _size(where: str, value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise CacheError("bad_config", f"{where}: {value!r} is not a window size "
                         "(a non-negative int or null)")
    return value


def _switch(where: str, cfg: Mapping[str, Any]) -> bool | None:
    """A level's ``use_sliding_window``: None when it says nothing."""
    use = cfg.get("use_sliding_window")
    if use is not None and not isinstance(use, bool):
        raise CacheError("bad_config", f"{where}use_sliding_window: {use!r} is not a bool")
    return use


def _nested(cfg: Mapping[str, Any]):
    """Each nested text config the model config holds, as (where, level), in NESTED order."""
    for key in NESTED:
        sub = cfg.get(key)
        if sub is None:
            continue
        if not isinstance(sub, Mapping):
            raise CacheError("bad_config", f"{key}: {type(sub).__name__} is not a mapping")
        yield f"{key}.", sub


def _level(where: str, cfg: Mapping[str, Any]) -> int | None:
    """The window one level of the config states: None when it says nothing."""
    size = _size(f"{where}sliding_window", cfg.get("sliding_window"))
    use = _switch(where, cfg)
    if use is True and not size:
        raise CacheError("bad_config", f"{where}use_sliding_window is true but "
                         f"{where}sliding_window gives no size")
    if use is False:
        return 0  # the switch wins: a size kept beside it is a leftover, not a window
    if "sliding_window" not in cfg:
        return None
    return size


def window_from_model_config(cfg: Mapping[str, Any]) -> int:
    """The model's window in tokens (0 = full attention), read from the top level and from every
    nested text config (WIN-1); levels that state different windows are an error naming both."""
    if not isinstance(cfg, Mapping):
        raise CacheError("bad_config", f"model config: {type(cfg).__name__} is not a mapping")
    found: list[tuple[str, int]] = []
    top = _level("", cfg)
    if top is not None:
        found.append(("sliding_window", top))
    for where, sub in _nested(cfg):
        got = _level(where, sub)
        if got is not None:
            found.append((f"{where}sliding_window", got))
    if len({w for _f, w in found}) > 1:
        said = ", ".join(f"{f} = {w}" for f, w in found)
        raise CacheError("bad_config", f"contradictory sliding windows: {said}")
    return found[0][1] if found else 0


def window_by_config_class(cfg: Mapping[str, Any]) -> tuple[int | None, bool]:
    """The window an engine reading the config through its architecture's config class takes
    (WIN-5): the nested text config, where there is one, configures the language model alone,
    else the top level does; ``use_sliding_window = false`` is no window, a stated size (null =
    none) is the window. What that level leaves unsaid is the class's default, which the config
    does not give: ``(None, positive)``, ``positive`` where the switch is on (a window, not
    none)."""
    if not isinstance(cfg, Mapping):
        raise CacheError("bad_config", f"model config: {type(cfg).__name__} is not a mapping")
    # The (last) nested text config configures the language model, else the top level does.
    where, level = ([("", cfg)] + list(_nested(cfg)))[-1]
    use = _switch(where, level)
    if use is False:
        return 0, False
    if "sliding_window" in level:
        return _size(f"{where}sliding_window", level["sliding_window"]), False
    return None, use is True
