"""The word before a CPU fit that will crawl (andrea_lab.fit.cpu_cost): said for the flagship's size, not for
the CPU-sized configs, with the arithmetic; and said by `andrea fit` itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from andrea_testing import MICRO_OVERRIDES

from andrea_lab.cli import main
from andrea_lab.fit import cpu_cost
from andrea_lab.fit.cpu_cost import cpu_step_note, machine_memory_bytes, step_memory_refusal

QUICKSTART = Path(__file__).resolve().parents[2] / "experiments" / "quickstart.yaml"


def test_the_flagship_on_the_cpu_is_announced_with_its_arithmetic():
    note = cpu_step_note(92_331_264, 16 * 1024, 200)
    assert note.startswith("note: training 92.3M parameters on the CPU, 16,384 tokens per step")
    assert "9.1 TFLOP per step, at least 45 s per step at 200 GFLOP/s" in note
    assert "200 steps take at least 2.5 h" in note and "experiments/quickstart.yaml" in note


def test_cpu_sized_runs_are_not_announced():
    assert cpu_step_note(1_900_000, 16 * 128, 600) is None  # the quickstart: about 0.1 TFLOP per step
    assert "steps take" not in cpu_step_note(10**9, 1024, None)  # no max_steps: no total


@pytest.mark.slow
def test_andrea_fit_says_it_before_the_first_step(tmp_path, text_corpus, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cpu_cost, "QUIET_BELOW_S", 0.0)  # the micro model as if it were the flagship
    args = ["fit", "--config", "experiments/quickstart.yaml", *MICRO_OVERRIDES, "--data.corpus", str(text_corpus)]
    args = [
        a.replace("experiments/", str(cpu_cost.__file__).rsplit("/andrea_lab/", 1)[0] + "/experiments/") for a in args
    ]
    assert main([*args, "--trainer.max_steps", "1", "--heldout.enabled", "false"]) == 0
    assert "note: training 0." in capsys.readouterr().err


def test_a_step_whose_logits_alone_exceed_the_machines_memory_is_refused_and_a_normal_one_is_not():
    gib = 2**30
    assert step_memory_refusal(32 * 64, 257, 24 * gib) is None  # cpu-base: 2,048 tokens, 2 MB of logits
    assert step_memory_refusal(10**9, 257, None) is None  # the OS did not say: nothing to compare with
    refusal = step_memory_refusal(2**24, 50257, 24 * gib)  # 16M tokens x GPT-2's vocabulary: 3.1 TiB
    assert refusal.startswith("a step of 16,777,216 tokens needs at least 3,141 GiB for its logits alone")
    assert "more than this machine's 24 GiB" in refusal and "data.batch_size" in refusal
    assert machine_memory_bytes() is None or machine_memory_bytes() > gib
