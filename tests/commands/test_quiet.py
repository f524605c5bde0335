"""The third-party noise `andrea` filters at its entry point, and only that."""

from __future__ import annotations

import logging
import warnings

from andrea_lab.commands.quiet import RANK_ZERO_LOGGERS, quiet_third_party


def test_the_leafspec_deprecation_is_filtered_and_other_warnings_are_not():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_third_party()
        warnings.warn(
            "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)`", FutureWarning
        )
        warnings.warn("something else is deprecated", FutureWarning)
    assert [str(w.message) for w in caught] == ["something else is deprecated"]


def test_lightnings_tips_are_dropped_and_its_other_lines_kept(caplog):
    quiet_third_party()
    quiet_third_party()  # twice: still one filter
    logger = logging.getLogger(RANK_ZERO_LOGGERS[0])
    assert len(logger.filters) == 1
    with caplog.at_level(logging.INFO):
        logger.info("💡 Tip: For seamless cloud logging and experiment tracking, try installing litlogger")
        logger.info("`Trainer.fit` stopped: `max_steps=6` reached.")
    assert [r.getMessage() for r in caplog.records] == ["`Trainer.fit` stopped: `max_steps=6` reached."]


def test_lightnings_not_resumable_warning_is_filtered_as_lightning_raises_it():
    from lightning.pytorch.utilities.rank_zero import rank_zero_warn
    from lightning.pytorch.utilities.warnings import PossibleUserWarning

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_third_party()
        rank_zero_warn(  # the message of lightning.pytorch.loops.training_epoch_loop, as it is raised
            "You're resuming from a checkpoint that ended before the epoch ended and your dataloader is"
            " not resumable. This can cause unreliable results if further training is done.",
            category=PossibleUserWarning,
        )
        rank_zero_warn("The dataloader does not have many workers.", category=PossibleUserWarning)
    assert [str(w.message) for w in caught] == ["The dataloader does not have many workers."]
