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


def test_andreas_fsdp_reads_a_resumed_checkpoint_with_andreas_reader_first(tmp_path):
    """FSDP's own loader unpickles; andrea's FSDP refuses a payload before it opens the file, and a sharded
    checkpoint (a directory: torch.distributed.checkpoint's metadata is a pickle) outright."""
    import torch

    from andrea_lab.fit.strategies import AndreaFSDPStrategy
    from andrea_lab.runs.checkpoint_io import UnsafeCheckpointError

    class Payload:
        def __reduce__(self):
            return (open, (str(tmp_path / "PAYLOAD_RAN"), "w"))

    strategy = AndreaFSDPStrategy(state_dict_type="full")
    require_safe_checkpoint_reading(SimpleNamespace(strategy=strategy), "last.ckpt")  # allowed to resume
    torch.save({"state_dict": {}, "payload": Payload()}, tmp_path / "handed.ckpt")
    with pytest.raises(UnsafeCheckpointError, match="handed.ckpt was refused"):
        strategy.load_checkpoint(tmp_path / "handed.ckpt")
    (tmp_path / "sharded").mkdir()
    with pytest.raises(UsageError, match="is a sharded FSDP checkpoint"):
        strategy.load_checkpoint(tmp_path / "sharded")
    assert not (tmp_path / "PAYLOAD_RAN").exists()
