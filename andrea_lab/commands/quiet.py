"""Third-party noise that ``andrea`` filters at its own entry point (never on import of the package: a
program that imports andrea_lab keeps its warnings and logging as it set them).

Each entry is a message every fit printed that asks nothing of an andrea user:

* torch's ``FutureWarning`` that ``isinstance(treespec, LeafSpec)`` is deprecated, raised inside a
  library's own code, not ours;
* Lightning's "💡 Tip:" lines advertising its cloud logger and model registry;
* Lightning's warning, on ``andrea fit --resume`` from a mid-epoch checkpoint, that the "dataloader is not
  resumable. This can cause unreliable results": it checks for its own ``_Stateful`` loaders only, while the
  data module saves and restores the position in its seeded window order itself (``AndreaDataModule.state_dict``),
  so a resumed fit trains on exactly the batches an unbroken one would (tests/test_resume.py).
"""

from __future__ import annotations

import logging
import warnings

#: FutureWarnings raised inside third-party code, by the start of their message.
THIRD_PARTY_WARNINGS = (r"`isinstance\(treespec, LeafSpec\)` is deprecated",)
#: Lightning's resume warning (a PossibleUserWarning, a UserWarning; matched by message so that this module
#: imports no Lightning), which does not apply to andrea's data module (the docstring above).
NOT_RESUMABLE = (
    r"You're resuming from a checkpoint that ended before the epoch ended and your dataloader is not resumable"
)
#: Lightning's advertisement lines start with this; they are logged by its rank-zero loggers.
TIP = "💡 Tip:"
RANK_ZERO_LOGGERS = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")


def _not_a_tip(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(TIP)


def quiet_third_party() -> None:
    """Filter :data:`THIRD_PARTY_WARNINGS`, Lightning's resume warning and its tips for the rest of this process."""
    for message in THIRD_PARTY_WARNINGS:
        warnings.filterwarnings("ignore", message=message, category=FutureWarning)
    warnings.filterwarnings("ignore", message=NOT_RESUMABLE, category=UserWarning)
    for name in RANK_ZERO_LOGGERS:
        logger = logging.getLogger(name)
        if _not_a_tip not in logger.filters:
            logger.addFilter(_not_a_tip)
