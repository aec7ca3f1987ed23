"""Which torch device the pools live on: ``auto`` takes CUDA when there is one."""

from __future__ import annotations

import torch

from kvconf.conformance.errors import KitError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(name)
    except RuntimeError:
        raise KitError(f"--device {name}: expected auto, cpu or cuda[:N]") from None
    if dev.type not in ("cpu", "cuda"):
        raise KitError(f"--device {name}: expected auto, cpu or cuda[:N]")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise KitError(f"--device {name}: no CUDA device here (torch {torch.__version__}"
                           f"{'' if torch.version.cuda else ', a build without CUDA'})")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise KitError(f"--device {name}: only {torch.cuda.device_count()} CUDA devices")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def describe(dev: torch.device) -> str:
    if dev.type == "cuda":
        return f"{dev} ({torch.cuda.get_device_name(dev)})"
    return "cpu"
