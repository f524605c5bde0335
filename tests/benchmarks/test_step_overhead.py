"""The step-overhead benchmark (benchmarks/step_overhead.py): step times read from the loss events, the bare
loop on the fit's own model and optimizer, the table's ratios, bad input in one line; end to end (slow). No
timing is asserted."""

from __future__ import annotations

import math

import pytest
from torch.utils.tensorboard import SummaryWriter

from andrea_lab.runs import tags
from benchmarks import step_overhead


def write_loss_events(directory, stamps: dict[int, float]) -> None:
    writer = SummaryWriter(str(directory))
    for step, wall in stamps.items():
        writer.add_scalar(tags.TRAIN_LOSS, 1.0, global_step=step, walltime=wall)
    writer.close()


def test_step_seconds_weigh_steps_not_events(tmp_path):
    write_loss_events(tmp_path, {0: 100.0, 5: 101.0, 10: 101.5, 15: 103.5})
    assert step_overhead.event_step_seconds(tmp_path, skip=0) == pytest.approx([0.2] * 5 + [0.1] * 5 + [0.4] * 5)
    assert step_overhead.event_step_seconds(tmp_path, skip=5) == pytest.approx([0.1] * 5 + [0.4] * 5)


def test_fewer_than_two_events_after_the_skip_cannot_time_a_step(tmp_path):
    write_loss_events(tmp_path, {0: 100.0, 5: 101.0})
    with pytest.raises(SystemExit, match="fewer than two train/loss events after step 5"):
        step_overhead.event_step_seconds(tmp_path, skip=5)


def test_the_fit_trains_the_shape_and_validates_only_after_its_last_step(tmp_path):
    command = step_overhead.fit_command(40, tmp_path, ["--stability.enabled=false"])
    assert command[3:6] == ["fit", "--config", str(step_overhead.CPU_BASE)]
    for expected in (
        "--model.config.d_model=128",
        "--model.config.n_layer=4",
        "--model.config.bias=false",
        "--data.batch_size=12",
        "--trainer.max_steps=40",
        "--trainer.val_check_interval=40",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
    ):
        assert expected in command
    assert command[-1] == "--stability.enabled=false"


def test_the_bare_loop_trains_the_fits_model_with_its_optimizer():
    module = step_overhead.bare_module()
    assert (module.config.d_model, module.config.n_layer, module.config.n_head) == (128, 4, 4)
    assert module.config.vocab_size == 257 and not module.config.bias  # cpu-base's byte vocabulary
    seconds = step_overhead.time_bare(steps=4, skip=1)
    assert len(seconds) == 3 and all(s > 0 for s in seconds)


def test_each_arm_is_measured_against_the_mean_of_the_bare_runs():
    timings = {"bare torch loop (first)": [0.1, 0.1], "fit": [0.3, 0.5], "bare torch loop (last)": [0.3, 0.3]}
    frame = step_overhead.table(timings, {arm: 1.0 for arm in timings})
    assert frame.loc["fit", "median / bare"] == pytest.approx(2.0)  # median 0.4 over (0.1 + 0.3) / 2
    assert frame.loc["fit", "mean ms"] == pytest.approx(400.0)
    assert frame.loc["bare torch loop (first)", "mean / bare"] == pytest.approx(0.5)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--threads", "0"], "--threads 0: give at least 1"),
        (["--skip", "-1"], "--skip -1: give 0 or more"),
        (["--steps", "19"], "--steps 19: give at least --skip + 10 = 20"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, words, capsys):
    assert step_overhead.main(argv) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_one_run_prints_every_arm_with_its_ratio(capsys):
    assert step_overhead.main(["--steps", "12", "--skip", "2"]) == 0
    out = capsys.readouterr().out
    arms = ["bare torch loop (first)", *step_overhead.FIT_ARMS, "bare torch loop (last)"]
    rows = {line.split("  ")[0]: line.split() for line in out.splitlines() if line.startswith(tuple(arms))}
    assert set(rows) == set(arms)
    assert all(math.isfinite(float(row[-4])) for row in rows.values())  # median / bare
