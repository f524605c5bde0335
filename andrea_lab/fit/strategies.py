"""Strategies that read a resumed checkpoint through andrea's reader.

Lightning's base ``Strategy.load_checkpoint`` reads through the trainer's CheckpointIO, which andrea makes its
weights-only, manifest-checked reader (andrea_lab.fit.handed.require_safe_checkpoint_io). FSDP reads its own
way: a full checkpoint with Lightning's lazy unpickler, a sharded one through ``torch.distributed.checkpoint``,
whose metadata is a pickle. A handed ``ckpt_path`` would run code there. :class:`AndreaFSDPStrategy` is FSDP
that first reads a full checkpoint with andrea's reader (refusing a payload before FSDP opens the file) and
refuses sharded ones; experiments/scale/fsdp.yaml uses it, and a resume under a strategy with its own loader
that is not one of these is refused (andrea_lab.fit.handed.require_safe_checkpoint_reading).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from lightning.pytorch.strategies import FSDPStrategy

from andrea_lab.errors import UsageError
from andrea_lab.runs.checkpoint_io import load_checkpoint


class AndreaFSDPStrategy(FSDPStrategy):
    """``FSDPStrategy`` (same arguments) whose resume reads the checkpoint with andrea's reader first."""

    #: Its ``load_checkpoint`` reads through andrea's reader before FSDP's (checked by handed.py).
    reads_through_andrea = True

    def load_checkpoint(self, checkpoint_path: Any, weights_only: Optional[bool] = None) -> dict[str, Any]:
        path = Path(self.broadcast(checkpoint_path))
        if path.is_dir():
            raise UsageError(
                f"{path} is a sharded FSDP checkpoint, whose metadata only loads by unpickling; andrea resumes "
                "from full checkpoints (trainer.strategy.init_args.state_dict_type: full, as in "
                "experiments/scale/fsdp.yaml)"
            )
        load_checkpoint(path)  # manifest and weights-only: a payload is refused here, before FSDP opens it
        return super().load_checkpoint(checkpoint_path, weights_only=True)
