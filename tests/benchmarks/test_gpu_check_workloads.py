"""benchmarks/gpu_check_workloads.py on the CPU: the token file is learnable and in range, loss curves
are read from real TensorBoard event files and compared, and the sanitizer cases cover what the issue
asks (LayerNorm at d = 768 and 8192 forward/backward and fused, strided SwiGLU, GELU tails)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from andrea_lab.data import read_token_file

ROOT = Path(__file__).resolve().parents[2]


def _load():
    spec = importlib.util.spec_from_file_location(
        "andrea_gpu_check_workloads", ROOT / "benchmarks" / "gpu_check_workloads.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


wl = _load()


def test_learnable_tokens_are_in_range_arithmetic_runs(tmp_path):
    path = tmp_path / "t_train.bin"
    wl.write_learnable_tokens(path, 1000, vocab=8449)
    tokens = np.asarray(read_token_file(path))
    assert len(tokens) == 1000 and tokens.min() >= 0 and tokens.max() < 8449
    steps = np.diff(tokens[:64].astype(np.int64)) % 8449
    assert len(set(steps.tolist())) == 1 and 1 <= steps[0] <= 6  # one stride within a run


def test_losses_are_read_from_tensorboard_events_in_step_order(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    run = tmp_path / "fit-cuda" / "version_0"
    writer = SummaryWriter(str(run))
    for step, loss in [(1, 8.5), (0, 9.0), (2, 7.25)]:
        writer.add_scalar("train/loss", loss, step)
        writer.add_scalar("train/lr", 1e-3, step)
    writer.close()
    assert wl.read_losses(tmp_path / "fit-cuda") == [9.0, 8.5, 7.25]
    with pytest.raises(FileNotFoundError, match="no run under"):
        wl.read_losses(tmp_path / "fit-torch")


def test_curves_that_agree_and_learn_pass_and_others_do_not():
    cuda = [9.0 - 0.02 * i for i in range(200)]
    close = [v + 0.01 for v in cuda]
    verdict = wl.compare_curves(cuda, close)
    assert verdict["steps"] == 200 and verdict["agree"] and verdict["learned"]
    assert verdict["mean_abs_diff_last_20"] == pytest.approx(0.01)
    assert not wl.compare_curves(cuda, [v + 0.2 for v in cuda])["agree"]
    assert not wl.compare_curves([9.0] * 200, [9.0] * 200)["learned"]
    assert wl.compare_curves([], cuda) == {"steps": 0, "agree": False, "learned": False}


def test_sanitizer_cases_cover_what_the_issue_lists():
    cases = wl.sanitizer_cases()
    for dtype in ("bfloat16", "float32"):
        for op in ("layer_norm", "add_layer_norm", "rms_norm"):
            widths = {shape[1] for o, d, shape, _ in cases if o == op and d == dtype}
            assert {768, 8192} <= widths
        assert any(o == "swiglu" and d == dtype and "scalar" in v for o, d, _, v in cases)
        assert any(o == "rms_norm" and d == dtype and shape[1] % 8 for o, d, shape, _ in cases)  # odd width
        assert any(o == "gelu_tanh" and d == dtype and shape[0] % 8 for o, d, shape, _ in cases)  # a scalar tail
    assert wl.sanitize(dry_run=True) == 0


def test_fit_command_is_the_flagship_config_with_one_backend(tmp_path):
    cmd = wl.fit_command("cuda", tmp_path / "t.bin", tmp_path / "runs", 200, dry_run=False)
    joined = " ".join(cmd)
    assert cmd[cmd.index("--config") + 1].endswith("experiments/andrea-120m.yaml")
    assert "--model.config.kernel_backend cuda" in joined and "--trainer.max_steps 200" in joined
    assert "--data.batch_size 16" in joined
    for kept in (
        "--trainer.precision",
        "--trainer.gradient_clip_val",
        "--trainer.accumulate_grad_batches",
        "--model.config.d_model",
    ):
        assert kept not in joined, f"{kept}: the flagship's own value is what the GPU check trains with"
