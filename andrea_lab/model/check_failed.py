"""The failure every behaviour check of a plugin raises (model/plugin_check.py, model/training_check.py)."""

from __future__ import annotations

#: The micro model the checks build: small enough that every combination takes milliseconds.
MICRO = dict(vocab_size=64, block_size=16, d_model=32, n_layer=2, n_head=2)


class CheckFailed(AssertionError):
    """A plugin does not behave as its contract says; the message says what it did and what was expected."""


def require(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)
