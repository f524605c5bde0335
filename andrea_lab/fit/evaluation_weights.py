"""Checkpoints of an optimizer that evaluates other weights than it trains (schedule-free AdamW).

Such a checkpoint's ``state_dict`` holds the weights to evaluate -- what ``andrea generate``, ``lens``,
``export`` and ``init_from`` read, like any checkpoint -- and :data:`TRAINING_WEIGHTS_KEY` the training
iterate, which a resumed fit loads instead (:func:`load_training_weights`, before Lightning loads the
``state_dict``), so that it continues bit for bit. For every other optimizer nothing changes.
"""

from __future__ import annotations

import contextlib
from typing import Callable

import torch

from andrea_lab.model.training_contracts import Optimizer

#: The checkpoint's top-level key for the training weights of an optimizer with its own evaluation weights.
TRAINING_WEIGHTS_KEY = "training_state_dict"


def swaps_weights(plugin: Optimizer | None) -> bool:
    """Whether an optimizer plugin evaluates other weights than it trains (it overrides ``evaluation_weights``)."""
    return plugin is not None and type(plugin).evaluation_weights is not Optimizer.evaluation_weights


def save_evaluation_weights(
    checkpoint: dict, state_dict: Callable[[], dict[str, torch.Tensor]], evaluation: contextlib.AbstractContextManager
) -> None:
    """Put the evaluation weights (read inside ``evaluation``) in ``checkpoint["state_dict"]``, the training
    weights under :data:`TRAINING_WEIGHTS_KEY`. Lightning's ``state_dict`` shares storage with the
    parameters, which ``evaluation`` restores on exit, so it holds the training weights again afterwards."""
    if "state_dict" not in checkpoint:
        return
    with evaluation:
        evaluated = {key: value.detach().clone() for key, value in state_dict().items()}
    checkpoint[TRAINING_WEIGHTS_KEY] = checkpoint["state_dict"]
    checkpoint["state_dict"] = evaluated


def load_training_weights(checkpoint: dict) -> None:
    """A resumed fit continues from the training weights: move them into ``checkpoint["state_dict"]``."""
    if TRAINING_WEIGHTS_KEY in checkpoint:
        checkpoint["state_dict"] = checkpoint.pop(TRAINING_WEIGHTS_KEY)
