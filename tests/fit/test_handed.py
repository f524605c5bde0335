"""andrea_lab/fit/handed.py: what a config may not choose, checked on the objects the trainer was built with."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from lightning.pytorch.strategies import SingleDeviceStrategy

from andrea_lab.errors import UsageError
from andrea_lab.fit.handed import require_safe_checkpoint_reading


class OwnLoaderStrategy(SingleDeviceStrategy):
    """A strategy that reads checkpoints its own way, as FSDP and DeepSpeed do (they need a GPU to build)."""

    def load_checkpoint(self, checkpoint_path):  # pragma: no cover - never reached: refused before
        raise AssertionError("read around andrea's reader")


def test_a_strategy_with_its_own_checkpoint_loader_is_refused_for_a_resume_only():
    own = SimpleNamespace(strategy=OwnLoaderStrategy(device="cpu"))
    with pytest.raises(UsageError, match="OwnLoaderStrategy reads a resumed checkpoint with its own loader"):
        require_safe_checkpoint_reading(own, "runs/x/checkpoints/last.ckpt")
    require_safe_checkpoint_reading(own, None)  # a fresh fit reads no checkpoint
    require_safe_checkpoint_reading(SimpleNamespace(strategy=SingleDeviceStrategy(device="cpu")), "last.ckpt")
