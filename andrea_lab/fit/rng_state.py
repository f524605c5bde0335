"""The random-number generators' states, saved into a checkpoint and restored from it.

Dropout masks and any sampling depend on the RNGs: a resumed run continues exactly as an uninterrupted
one would only if torch's, CUDA's, numpy's and Python's generators continue where they were. numpy's
state is stored with its key array as a tensor, so that the checkpoint loads with ``weights_only=True``
(andrea_lab/runs/checkpoint_io.py).
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def capture_rng_states() -> dict[str, Any]:
    """Every generator's state, in a form the weights-only loader reads back."""
    name, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": (name, torch.from_numpy(keys.astype(np.int64)), position, has_gauss, cached_gaussian),
        "python": random.getstate(),
    }


def restore_rng_states(states: dict[str, Any]) -> None:
    """Set every generator to the states :func:`capture_rng_states` returned (CUDA's only where there is one)."""
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    name, keys, position, has_gauss, cached_gaussian = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), position, has_gauss, cached_gaussian))
    random.setstate(states["python"])
