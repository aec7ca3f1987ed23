"""Model configs at the kit's boundary: a Hugging Face style ``config.json`` to a window size.

The rule itself is the reference's (``kvconf.reference.window``, WIN-1); here a file or mapping is
read, and a bad one becomes a KitError naming the file and the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kvconf.conformance.errors import KitError, read_input
from kvconf.conformance.scheduler.trace import SchedConfig
from kvconf.reference.errors import CacheError
from kvconf.reference.window import window_from_model_config


def load_model_config(path: Path | str) -> dict[str, Any]:
    from kvconf.conformance.trace import parse_json

    p = Path(path)
    data = parse_json(read_input(p, "model config"), str(p))
    if not isinstance(data, dict):
        raise KitError(f"{p}: a model config is a JSON object, got {type(data).__name__}")
    return data


def model_window(source: Mapping[str, Any] | Path | str) -> int:
    """The sliding window a model config states (0 = full attention)."""
    where = "model config"
    if isinstance(source, (Path, str)):
        where = str(source)
        source = load_model_config(source)
    try:
        return window_from_model_config(source)
    except CacheError as e:
        raise KitError(f"{where}: {e.message}") from None


def with_model_window(config: SchedConfig, source: Mapping[str, Any] | Path | str) -> SchedConfig:
    """``config`` with the model's window switched on (D381-5: an explicit switch)."""
    return config.model_copy(update={"sliding_window": model_window(source)})
