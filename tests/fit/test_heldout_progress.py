"""Where `andrea validate` puts its held-out record, and the progress lines of the held-out evaluation."""

from __future__ import annotations

from pathlib import Path

from andrea_lab.data.progress import Progress
from andrea_lab.fit.heldout import record_path


def test_the_record_goes_into_the_checkpoints_run_or_beside_a_loose_checkpoint():
    assert record_path("runs/quickstart/version_2/checkpoints/last.ckpt") == Path(
        "runs/quickstart/version_2/validate.json"
    )
    assert record_path("models/micro.ckpt") == Path("models/micro.validate.json")
    assert record_path(None) is None


def test_progress_prints_at_the_start_every_interval_and_at_the_end():
    times, lines = iter([0.0, 3.0, 11.0, 12.0, 25.0]), []
    progress = Progress(
        4, "held-out evaluation of 64 windows", every_s=10.0, clock=lambda: next(times), say=lines.append
    )
    for batch in range(1, 5):
        progress.step(batch)
    assert lines == [
        "held-out evaluation of 64 windows: 4 batches ...",
        "held-out evaluation of 64 windows: 2/4 batches (50 %), 11 s",
        "held-out evaluation of 64 windows: 4/4 batches (100 %), 25 s",
    ]


def test_progress_goes_to_stderr_by_default(capsys):
    Progress(2, "lens over 20 held-out windows").step(2)
    assert capsys.readouterr().err.splitlines() == [
        "lens over 20 held-out windows: 2 batches ...",
        "lens over 20 held-out windows: 2/2 batches (100 %), 0 s",
    ]
