"""A deliberately too-high learning rate: the run stops with a clear message and exit status 3, or
skips the bad updates up to a limit — never a traceback."""

from pathlib import Path

import pytest
from andrea_testing import MICRO_OVERRIDES

from andrea_lab.cli import DIVERGED_EXIT_STATUS, main

QUICKSTART = str(Path(__file__).resolve().parents[1] / "experiments" / "quickstart.yaml")


def fit(tmp_path, corpus, *extra):
    return main(
        [
            "fit",
            "--config",
            QUICKSTART,
            *MICRO_OVERRIDES,
            "--data.corpus",
            str(corpus),
            "--trainer.logger.init_args.save_dir",
            str(tmp_path / "runs"),
            "--trainer.max_steps",
            "30",
            "--trainer.val_check_interval",
            "10",
            "--model.lr",
            "1e30",
            "--model.warmup_steps",
            "0",
            *extra,
        ]
    )


@pytest.mark.slow
def test_stop_policy_ends_with_a_message_and_distinct_status(tmp_path, text_corpus, capsys):
    status = fit(tmp_path, text_corpus)
    err = capsys.readouterr().err
    assert status == DIVERGED_EXIT_STATUS
    assert "training diverged at step" in err and "Try a lower model.lr" in err
    assert "Traceback" not in err


@pytest.mark.slow
def test_skip_policy_skips_up_to_the_limit_then_stops(tmp_path, text_corpus, capsys):
    with pytest.warns(RuntimeWarning, match="update skipped"):
        # Checked every step (log_every_n_steps 1): three skipped steps warn, the fourth stops the run.
        status = fit(
            tmp_path,
            text_corpus,
            "--model.on_nonfinite",
            "skip",
            "--model.max_skipped_steps",
            "3",
            "--trainer.log_every_n_steps",
            "1",
        )
    err = capsys.readouterr().err
    assert status == DIVERGED_EXIT_STATUS
    assert "more than max_skipped_steps=3 non-finite steps" in err
