"""The precursor signals of an instability, and the record of which gave way first, on constructed runs whose
attention logits are forced to grow or whose output logits are forced to drift."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch
from stability_helpers import fit, micro_module
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from andrea_lab.fit import RunSummary, StabilityMonitor
from andrea_lab.fit.stability import precursors
from andrea_lab.fit.stability.monitor import measure_probe
from andrea_lab.fit.stability.precursors import OptimizerState, second_moments, top_singular_value
from andrea_lab.model.config import preset
from andrea_lab.model.transformer import Andrea
from andrea_lab.runs import tags


def micro(seed: int = 0) -> Andrea:
    torch.manual_seed(seed)
    return Andrea(preset("andrea-micro"))


def test_power_iteration_finds_the_top_singular_value():
    g = torch.Generator().manual_seed(0)
    u, _ = torch.linalg.qr(torch.randn(96, 32, generator=g))
    v, _ = torch.linalg.qr(torch.randn(48, 32, generator=g))
    singular = torch.linspace(5.0, 0.1, 32)  # a 10 % gap between the top two, as the docstring promises
    singular[1] = 4.5
    matrix = u @ torch.diag(singular) @ v.T
    assert top_singular_value(matrix).item() == pytest.approx(5.0, rel=1e-2)
    assert top_singular_value(torch.zeros(4, 3)).item() == 0.0


def test_per_head_logit_max_and_massive_activations_on_the_probe():
    values = measure_probe(micro(), torch.randint(0, 257, (2, 32)))
    heads = [v for k, v in values.items() if k.startswith("attn_logit_max_head/block_00_h")]
    assert len(heads) == 2 and max(heads) == pytest.approx(values["attn_logit_max/block_00"])
    assert values["massive_activation/block_01"] >= 1.0


def test_adam_eps_share_counts_the_coordinates_whose_second_moment_is_below_eps():
    model = micro()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, eps=1e-8)
    for p in model.parameters():  # one step where only the first block's parameters get a gradient
        p.grad = torch.ones_like(p) if any(p is q for q in model.blocks[0].parameters()) else torch.zeros_like(p)
    optimizer.step()
    group_of = {id(p): "block_00" for p in model.blocks[0].parameters()}
    group_of.update({id(p): "block_01" for p in model.blocks[1].parameters()})
    share = precursors.adam_eps_share.compute(second_moments(group_of, [optimizer]))
    assert share["block_00"].item() == 0.0 and share["block_01"].item() == 1.0
    assert precursors.adam_eps_share.compute(OptimizerState({})) == {}
    assert second_moments(group_of, [torch.optim.SGD(model.parameters(), lr=1.0)]).second_moments == {}


# ------------------------------------------------------------------------------ constructed runs


class GrowAttention(L.Callback):
    """From ``start`` until ``hurt_at``, multiply the first block's query and key weights by ``factor`` before
    every step: its attention logits grow by factor² per step, as in Wortsman et al.'s attention-logit growth.
    A model this young barely uses its attention, so the collapse alone does not cost loss: from ``hurt_at`` on
    the final norm's weights are zeroed (every logit 0, the loss ln 257), the loss's own failure, later. The
    growth stops there and is gentle enough to stay finite: at 1.6 per step (logits ~1e7 by step 49) one CPU's
    attention backward returned NaN gradients, a non-finite stop instead of the loss's rise under test."""

    def __init__(self, start: int, hurt_at: int, factor: float = 1.3):
        self.start, self.hurt_at, self.factor = start, hurt_at, factor

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step >= self.hurt_at:
            with torch.no_grad():
                for p in pl_module.model.final_norm.parameters():
                    p.zero_()
        if self.start <= trainer.global_step < self.hurt_at:
            with torch.no_grad():
                attention = next(m for m in pl_module.model.blocks[0].modules() if hasattr(m, "qkv"))
                qkv = attention.qkv.weight
                qkv[: 2 * qkv.shape[1]] *= self.factor


class DriftLogits(L.Callback):
    """From ``start`` on, shift every output logit by −2^(step − start) (a hook on the head): the softmax is
    unchanged until float32 can no longer resolve the logits' differences, so log Z drifts long before the
    loss moves, as in Wortsman et al.'s output-logit divergence."""

    def __init__(self, start: int):
        self.start, self.shift = start, 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step >= self.start:
            self.shift = -(2.0 ** (trainer.global_step - self.start))

    def on_fit_start(self, trainer, pl_module):
        pl_module.model.lm_head.register_forward_hook(lambda module, args, out: out + self.shift)


def constructed_run(tmp_path, text_corpus, injector: L.Callback, max_steps: int = 80, horizon: int = 25):
    # A unigram level far above the loss: the run counts as trained at once, so that the first rise of the
    # smoothed loss by 0.3 nat for 5 steps is a trained_then_diverged divergence.
    monitor = StabilityMonitor(
        interval=2,
        flush_every=2,
        unigram_loss=10.0,
        stuck_after=10,
        rise_margin=0.3,
        rise_patience=5,
        spike_threshold=5.0,
        spectral_every=0,  # the weights are scaled by hand here: their singular values would tell on it
        band_horizon=horizon,  # a young model's logits grow by themselves in its first steps: not precursors
        stop_on_divergence=True,
    )
    summary = RunSummary()
    module = micro_module(lr=3e-3, warmup_steps=0)
    trainer = fit(tmp_path, text_corpus, [injector, monitor, summary], max_steps=max_steps, module=module)
    return trainer, monitor, json.loads(summary.path.read_text())


def test_forced_attention_logit_growth_is_named_first_ahead_of_the_loss(tmp_path, text_corpus):
    trainer, monitor, record = constructed_run(tmp_path, text_corpus, GrowAttention(start=30, hurt_at=50))
    assert record["status"] == "diverged" and record["divergence"]["kind"] == "trained_then_diverged"
    first = next(r for r in record["gave_way_first"] if r["event"] == "divergence")
    metric, key = first["signal"].split("/")
    assert metric in ("attn_logit_max_head", "attn_entropy") and key.startswith("block_00"), first
    assert 30 <= first["left_band_at"] < 50 and first["lead_steps"] >= 10, first
    events = EventAccumulator(trainer.logger.log_dir, size_guidance={"scalars": 0})
    events.Reload()
    assert f"{tags.GAVE_WAY_FIRST}/{first['signal']}" in events.Tags()["scalars"]
    assert events.Scalars(tags.TRAINED_THEN_DIVERGED)[-1].value == 1.0


def test_forced_output_logit_drift_is_named_as_log_z(tmp_path, text_corpus):
    trainer, monitor, record = constructed_run(tmp_path, text_corpus, DriftLogits(start=30), max_steps=120, horizon=40)
    assert record["status"] == "diverged", record["divergence"]
    first = next(r for r in record["gave_way_first"] if r["event"] == "divergence")
    assert first["signal"] == "log_z" and 30 <= first["left_band_at"] <= 34, first
    assert first["lead_steps"] >= 10, "log Z moved long before float32 lost the logits' differences"
    events = EventAccumulator(trainer.logger.log_dir, size_guidance={"scalars": 0})
    events.Reload()
    logged = events.Tags()["scalars"]
    for metric in (precursors.update_rms_ratio, precursors.adam_eps_share, precursors.massive_activation):
        assert any(metric.owns(tag) for tag in logged), metric.tag
    assert not any(precursors.weight_sigma_max.owns(tag) for tag in logged), "spectral_every=0: never estimated"


def test_singular_values_are_estimated_on_every_nth_probe_only(tmp_path, text_corpus):
    monitor = StabilityMonitor(interval=2, flush_every=2, spectral_every=3)
    trainer = fit(tmp_path, text_corpus, [monitor], max_steps=12, module=micro_module(warmup_steps=0))
    events = EventAccumulator(trainer.logger.log_dir, size_guidance={"scalars": 0})
    events.Reload()
    tag = next(t for t in events.Tags()["scalars"] if precursors.weight_sigma_max.owns(t))
    assert [e.step for e in events.Scalars(tag)] == [0, 6], "probes at 0, 2, 4, ...: the 1st, 4th, 7th estimate"
    probes = [
        e.step for e in events.Scalars(f"stability/{precursors.update_rms_ratio.name}/blocks_0_attn_sublayer_qkv")
    ]
    assert probes[:3] == [0, 2, 4]
