"""ModelCheckpoint whose restored state can only name files inside its own checkpoint directory.

Lightning's ``ModelCheckpoint`` restores, from the checkpoint a fit resumes from, the paths of the
"previous" checkpoints (``best_k_models``, ``last_model_path``, ...), and later deletes the ones it
no longer keeps -- recursively, after a check that is only lexical (``dirpath in path.parents``), so
``dirpath + "/../../../../important"`` passes it. A checkpoint someone hands you could therefore
delete a directory of yours. Here every restored path is kept only if, with ``..`` and symbolic links
resolved, it lies inside the resolved ``dirpath`` and is a checkpoint file (or absent); the rest is
dropped with a warning, and no removal goes outside that directory either.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.rank_zero import rank_zero_warn

from andrea_lab.fit.handed import checked_name

#: The state keys that hold one checkpoint path each (``best_k_models`` holds several).
_PATH_KEYS = ("best_model_path", "kth_best_model_path", "last_model_path")


def inside_directory(path: Any, directory: str | os.PathLike | None) -> bool:
    """Whether ``path`` names a checkpoint file inside ``directory`` once ``..`` and links are resolved.

    Remote URLs (``s3://...``) are never inside: a local run's restored state has no business naming one."""
    if directory is None or not isinstance(path, str) or not path or "://" in path:
        return False
    real = Path(os.path.realpath(path))
    if real.exists() and not real.is_file():
        return False
    return Path(os.path.realpath(directory)) in real.parents


class AndreaModelCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` (same arguments) that sanitises the state it restores; see the module doc."""

    #: Every formatted file name is checked to stay in ``dirpath`` (:meth:`format_checkpoint_name`), so its
    #: ``filename`` may name a metric with a '/' (andrea_lab.fit.handed.check_writes_inside reads this).
    checked_filename = True

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict(state_dict)
        dropped = [
            getattr(self, key)
            for key in _PATH_KEYS
            if getattr(self, key) and not inside_directory(getattr(self, key), self.dirpath)
        ]
        for key in _PATH_KEYS:
            if not inside_directory(getattr(self, key), self.dirpath):
                setattr(self, key, "")
        kept = {path: score for path, score in self.best_k_models.items() if inside_directory(path, self.dirpath)}
        dropped += [path for path in self.best_k_models if path not in kept]
        self.best_k_models = kept
        if dropped:
            rank_zero_warn(
                f"ignored {len(dropped)} checkpoint path(s) in the restored ModelCheckpoint state that lie "
                f"outside this run's checkpoint directory {self.dirpath} (e.g. {dropped[0]!r}); "
                "nothing outside it is ever removed"
            )

    def _should_remove_checkpoint(self, trainer, previous: str, current: str) -> bool:
        return super()._should_remove_checkpoint(trainer, previous, current) and inside_directory(
            previous, self.dirpath
        )

    def format_checkpoint_name(self, *args: Any, **kwargs: Any) -> str:
        """Lightning's name, refused unless it is one file directly in ``dirpath`` once formatted: a
        ``filename`` such as ``../../outside/evil{step}`` would write outside the run."""
        return checked_name(super().format_checkpoint_name(*args, **kwargs), self.dirpath)

    @property
    def state_key(self) -> str:
        """``ModelCheckpoint``'s key, so checkpoints written before this subclass existed resume unchanged."""
        return super().state_key.replace(type(self).__qualname__, ModelCheckpoint.__qualname__, 1)
