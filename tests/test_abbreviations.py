"""An abbreviated option is an error, not a guess: `--trainer.max_step 5` must not become `max_steps`."""

from __future__ import annotations

from pathlib import Path

from andrea_lab.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_an_abbreviated_flag_is_refused_with_exit_status_2(capsys):
    assert (
        main(
            ["fit", "--config", str(REPO / "experiments/quickstart.yaml"), "--trainer.max_step", "5", "--print_config"]
        )
        == 2
    )
    assert "unrecognized arguments: --trainer.max_step 5" in capsys.readouterr().err
