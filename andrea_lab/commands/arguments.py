"""Checks of command-line values several commands share, each a one-line :class:`UsageError`.

argparse checks types; these check what a type cannot: a device this build can run on, a plot format
matplotlib can write. Checked before the checkpoint is read, so a typo costs no time.
"""

from __future__ import annotations

from pathlib import Path

from andrea_lab.errors import UsageError


def checked_device(name: str, option: str = "--device"):
    """``name`` as a ``torch.device`` this process can run on: ``cpu``, ``cuda[:N]`` with a visible GPU N,
    ``mps`` where available."""
    import torch

    available = ["cpu"] + [f"cuda:{n}" for n in range(torch.cuda.device_count())]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        available.append("mps")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        device = None
    usable = device is not None and (
        device.type == "cpu"
        or (device.type == "cuda" and torch.cuda.is_available() and (device.index or 0) < torch.cuda.device_count())
        or (device.type == "mps" and "mps" in available)
    )
    if not usable:
        build = "" if torch.cuda.is_available() else f" (this PyTorch {torch.__version__} sees no CUDA GPU)"
        raise UsageError(
            f"{option} {name!r} is not a device this process can use{build}; available: {', '.join(available)}"
        )
    return device


def check_plot_file(path: str, option: str = "--plot") -> None:
    """``path`` ends in an image format matplotlib writes (``.png``, ``.pdf``, ``.svg``, ...)."""
    from matplotlib.backend_bases import FigureCanvasBase

    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in formats:
        raise UsageError(
            f"{option} {path}: {('.' + suffix) if suffix else 'no suffix'} is not an image format "
            f"matplotlib writes; use one of {', '.join('.' + f for f in formats)}"
        )
