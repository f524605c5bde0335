"""benchmarks/cpu_attention.py at toy size: every arm trains, the fp32-attention arm really runs its attention in
float32, the profile names the attention. No timing is asserted."""

import torch
from andrea_testing import attention_input_dtypes

from benchmarks import cpu_attention


def test_every_arm_takes_a_step_and_only_the_fp32_attention_arm_upcasts(monkeypatch):
    steps = {name: cpu_attention.training_step(64, 2, name) for name in cpu_attention.ARMS}  # built: a model's
    seen = attention_input_dtypes(monkeypatch)  # construction checks run fp32, so record only the steps
    dtypes = {}
    for arm, step in steps.items():
        seen.clear()
        step()
        dtypes[arm] = set(seen)
    assert dtypes == {"fp32": {torch.float32}, "bf16": {torch.bfloat16}, "bf16+fp32-attention": {torch.float32}}


def test_the_profile_lists_the_costliest_ops(capsys):
    cpu_attention.profile_steps(64, 2, "bf16", steps=1, top=3)
    out = capsys.readouterr().out
    assert out.startswith("d64 bf16: ") and len(out.strip().splitlines()) == 4


def test_the_attention_alone_is_timed_in_either_dtype():
    assert cpu_attention.attention_seconds(64, 2, torch.bfloat16, reps=1) > 0
