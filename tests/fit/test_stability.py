"""StabilityMonitor: probe statistics on tiny models with known properties, and a monitor that never
changes training."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
from andrea_testing import NaNAtStep
from stability_helpers import GlobalRNGValLoader, LossRecorder, fit, micro_module
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from andrea_lab.errors import DivergenceError
from andrea_lab.fit import RunSummary, StabilityMonitor
from andrea_lab.fit.stability import probe
from andrea_lab.fit.stability.events import divergence_flags
from andrea_lab.fit.stability.monitor import CUSTOM_SCALARS_LAYOUT, measure_probe
from andrea_lab.fit.stability.unigram import sample_unigram_loss
from andrea_lab.model.config import preset
from andrea_lab.model.transformer import Andrea, AttentionLogits
from andrea_lab.runs import tags as andrea_tags


def micro(seed: int = 0, **overrides) -> Andrea:
    torch.manual_seed(seed)
    return Andrea(preset("andrea-micro", **overrides))


def batch(seed: int = 1, B: int = 4, T: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 257, (B, T), generator=g), torch.randint(0, 257, (B, T), generator=g)


def scalars(run_dir, tag: str) -> list[tuple[int, float]]:
    events = EventAccumulator(str(run_dir), size_guidance={"scalars": 0})
    events.Reload()
    return [(e.step, e.value) for e in events.Scalars(tag)]


# --------------------------------------------------------- known properties


def test_probe_reports_every_metric_for_every_block():
    values = measure_probe(micro(), *batch())
    for i in range(2):
        tag = f"block_{i:02d}"
        for name in (
            f"grad_norm/{tag}",
            f"stream_rms/{tag}",
            f"delta_ratio/{tag}_attn",
            f"delta_ratio/{tag}_mlp",
            f"attn_logit_max/{tag}",
            f"dead_fraction/{tag}",
        ):
            assert name in values and math.isfinite(values[name]), name
    for name in ("grad_norm/embeddings", "grad_norm/head", "logit_max", "log_z", "probe_loss"):
        assert math.isfinite(values[name]), name


@pytest.mark.usefixtures("import_paths")
def test_embedding_gradient_vanishes_without_residuals_at_init():
    """Xiong et al.'s depth profile, at its extreme: with the residual path, the gradient reaching the
    embeddings at initialisation is as large as the blocks'; with no residual (and no norm) each small-gain
    sublayer multiplies it down, by orders of magnitude even in a 2-block model."""
    x, y = batch()
    with_residual = measure_probe(micro(), x, y)
    without = measure_probe(micro(norm_placement="stability_helpers:BareNoResidual"), x, y)
    assert with_residual["grad_norm/embeddings"] > 0.05
    assert without["grad_norm/embeddings"] < 1e-3 * with_residual["grad_norm/embeddings"]
    # The profile across depth: without residuals the gradient shrinks towards the input.
    assert without["grad_norm/block_00"] < 1e-2 * without["grad_norm/block_01"]
    assert with_residual["grad_norm/block_00"] > 0.1 * with_residual["grad_norm/block_01"]


def test_tied_embedding_gradient_is_split_into_input_and_head_shares():
    """The token matrix is both the input embedding and the output head. Untying a copy of the model (same
    weights, same forward) gives each role its own parameter: the tied model's grad_norm/embeddings and
    grad_norm/head must equal the untied model's plain parameter gradients of the two roles."""
    x, y = batch()
    tied = micro()
    untied = micro()
    untied.lm_head.weight = torch.nn.Parameter(untied.token_embed.weight.detach().clone())
    values = measure_probe(tied, x, y)
    _, loss = untied.eval()(x, y)
    loss.backward()
    embeddings = math.hypot(
        untied.token_embed.weight.grad.norm().item(), untied.position_embed.weight.grad.norm().item()
    )
    head = math.sqrt(
        untied.lm_head.weight.grad.norm().item() ** 2
        + sum(p.grad.norm().item() ** 2 for p in untied.final_norm.parameters())
    )
    assert values["grad_norm/embeddings"] == pytest.approx(embeddings, rel=1e-4)
    assert values["grad_norm/head"] == pytest.approx(head, rel=1e-4)
    assert measure_probe(untied, x, y)["grad_norm/embeddings"] == pytest.approx(embeddings, rel=1e-4)


@pytest.mark.usefixtures("import_paths")
def test_layer_norm_without_the_add_keeps_the_embedding_gradient_at_init():
    """LN(f(x)) without the residual add does *not* starve the embeddings at initialisation: LayerNorm's
    scale invariance undoes each sublayer's small gain (the measured counterpart of the test above)."""
    x, y = batch()
    with_residual = measure_probe(micro(), x, y)["grad_norm/embeddings"]
    norm_only = measure_probe(micro(norm_placement="stability_helpers:NormNoResidual"), x, y)["grad_norm/embeddings"]
    assert 0.1 * with_residual < norm_only < 10 * with_residual


def test_attention_logit_max_matches_an_explicit_computation():
    model = micro()
    with torch.no_grad():
        model.blocks[0].attn.sublayer.qkv.weight[:64] *= 40.0  # large queries: a large, known max logit
    x, y = batch(T=16)
    values = measure_probe(model, x, y)
    with torch.no_grad():
        stream = model.token_embed(x) + model.position_embed(torch.arange(16))
        attn = model.blocks[0].attn
        q, k, _ = attn.sublayer.qkv(attn.norm(stream)).split(64, dim=2)
        q, k = (t.view(4, 16, 2, 32).transpose(1, 2) for t in (q, k))
        scores = q @ k.transpose(-1, -2) / math.sqrt(32)
        causal = torch.ones(16, 16, dtype=torch.bool).tril()
        expected = scores[..., causal].max().item()
        everything = scores.max().item()
    assert values["attn_logit_max/block_00"] == pytest.approx(expected, rel=1e-5)
    assert expected > 1.0
    assert everything >= expected  # future positions are excluded, not included


def test_attention_entropy_of_uniform_attention_is_log_of_the_allowed_positions():
    """q = 0 makes every allowed logit 0: query t attends uniformly to t+1 positions, entropy ln(t+1); the
    masked future (-inf, probability 0) adds nothing. A second head with a peaked pattern is the lowest."""
    T = 9
    k = torch.randn(2, 2, T, 4)
    q = torch.zeros(2, 2, T, 4)
    q[:, 1] = 1e4 * k[:, 1]  # head 1: each query's own key dominates by far — entropy ~0
    values = probe.attn_entropy.compute(probe.Sublayer(3, "attn", None, None), AttentionLogits(q, k))
    uniform = torch.log(torch.arange(1, T + 1, dtype=torch.float32)).mean()
    assert values["block_03"].item() == pytest.approx(uniform.item() / 2, rel=1e-4, abs=1e-4)
    assert values["block_03_min"].item() == pytest.approx(0.0, abs=1e-4)
    probed = measure_probe(micro(), *batch(T=16))
    assert 0 < probed["attn_entropy/block_01_min"] <= probed["attn_entropy/block_01"] <= math.log(16)


def test_attention_extremes_are_the_largest_logit_and_the_lowest_head_entropy():
    logged = {
        "stability/attn_logit_max/block_00": 2.0,
        "stability/attn_logit_max/block_01": 5.0,
        "stability/attn_entropy/block_00": 1.5,
        "stability/attn_entropy/block_00_min": 0.7,
        "stability/attn_entropy/block_01": 1.2,
        "stability/attn_entropy/block_01_min": 0.9,
        "stability/log_z": 9.0,
    }
    assert probe.attention_extremes(logged) == {"attn_logit_max_final": 5.0, "attn_entropy_min_final": 0.7}
    logged["stability/attn_logit_max/block_01"] = math.inf
    assert probe.attention_extremes(logged)["attn_logit_max_final"] is None
    assert probe.attention_extremes({}) == {"attn_logit_max_final": None, "attn_entropy_min_final": None}


def test_log_z_is_charted_beside_the_z_loss_curve():
    charts = list(CUSTOM_SCALARS_LAYOUT[probe.LOGITS].items())
    titles = [title for title, _ in charts]
    log_z_chart = next(
        i for i, (_, (_, regexes)) in enumerate(charts) if any(re.search(r, probe.log_z.tag) for r in regexes)
    )
    assert any(re.search(r, andrea_tags.TRAIN_Z_LOSS) for r in charts[log_z_chart + 1][1][1]), titles


def test_logit_max_and_log_z_at_init():
    model = micro()
    x, y = batch()
    values = measure_probe(model, x, y)
    logits, loss = model.eval()(x, y)
    assert values["log_z"] == pytest.approx(torch.logsumexp(logits, -1).mean().item(), rel=1e-5)
    assert values["logit_max"] == pytest.approx(logits.max().item(), rel=1e-5)
    assert values["probe_loss"] == pytest.approx(loss.item(), rel=1e-5)
    # Small logits at init: log Z is about ln(vocab).
    assert values["log_z"] == pytest.approx(math.log(257), abs=0.05)


def test_dead_fraction_counts_units_that_never_fire():
    model = micro(activation="relu")
    with torch.no_grad():
        model.blocks[0].mlp.sublayer.fc.bias.fill_(-1e3)  # block 0: every ReLU unit is off for every token
    values = measure_probe(model, *batch())
    assert values["dead_fraction/block_00"] == 1.0
    assert values["dead_fraction/block_01"] < 0.05
    assert measure_probe(micro(activation="gelu"), *batch())["dead_fraction/block_00"] == 0.0


def test_delta_ratio_and_stream_rms_are_measured_at_the_wrappers():
    model = micro()
    with torch.no_grad():
        proj = model.blocks[0].attn.sublayer.proj
        proj.weight.zero_()
        proj.bias.zero_()
    x, y = batch()
    values = measure_probe(model, x, y)
    assert values["delta_ratio/block_00_attn"] == 0.0  # pre-norm: delta is the (now zero) sublayer output
    assert values["delta_ratio/block_00_mlp"] > 0.0
    with torch.no_grad():
        stream = model.token_embed(x) + model.position_embed(torch.arange(64))
        out = model.blocks[0](stream)
        mlp_delta = out - stream
    assert values["stream_rms/block_00"] == pytest.approx(out.pow(2).mean().sqrt().item(), rel=1e-5)
    assert values["delta_ratio/block_00_mlp"] == pytest.approx((mlp_delta.norm() / stream.norm()).item(), rel=1e-5)


@pytest.mark.usefixtures("import_paths")
def test_probe_leaves_grads_mode_and_rng_untouched():
    model = micro(dropout=0.1, norm_placement="stability_helpers:NoisyPreNorm").train()  # draws RNG in eval too
    for p in model.parameters():
        p.grad = torch.full_like(p, 0.25)
    grads_before = [p.grad for p in model.parameters()]
    rng_before = torch.get_rng_state()
    measure_probe(model, *batch())
    assert all(p.grad is g and bool((g == 0.25).all()) for p, g in zip(model.parameters(), grads_before))
    assert torch.equal(torch.get_rng_state(), rng_before)
    assert all(m.training for m in model.modules())


def test_unigram_loss_from_a_token_sample():
    tokens = torch.tensor([0, 1] * 500 + [2] * 1000).numpy()
    assert sample_unigram_loss(tokens, vocab_size=3) == pytest.approx(
        -(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25))
    )
    uniform = torch.arange(257).repeat(40).numpy()
    assert sample_unigram_loss(uniform, 257, max_tokens=257 * 8, chunks=8) == pytest.approx(math.log(257))


# ------------------------------------------------------------- in a fit


def test_monitor_does_not_change_training(tmp_path, text_corpus):
    """Dropout on, and a validation loader that draws from the global RNG when iterated, so that any RNG
    draw by the monitor (e.g. fetching the probe batch) would change the masks; probes at steps 0, 2, 4, 6
    with their backward passes."""

    def run(with_monitor: bool):
        recorder = LossRecorder()
        monitor = StabilityMonitor(interval=2, flush_every=3)
        callbacks = [recorder] + ([monitor] if with_monitor else [])
        torch.manual_seed(0)
        module = micro_module(dropout=0.1)
        fit(
            tmp_path,
            text_corpus,
            callbacks,
            max_steps=8,
            module=module,
            logger=False,
            name=str(with_monitor),
            datamodule_cls=GlobalRNGValLoader,
        )
        return recorder.losses, monitor, module

    plain, _, plain_module = run(False)
    monitored, monitor, monitored_module = run(True)
    assert len(plain) == 8
    assert monitored == plain, "identical training losses with and without the monitor"
    for a, b in zip(plain_module.parameters(), monitored_module.parameters()):
        assert torch.equal(a, b)
    assert len(monitor.probe_seconds) == 4 and "stability/grad_norm/block_00" in monitor.last_probe
    assert len(monitor.grad_norms) == 8


def test_monitor_logs_grouped_metrics_update_ratio_and_layout(tmp_path, text_corpus):
    module = micro_module(lr=1e-3, warmup_steps=0)
    block0 = [p.detach().clone() for p in module.model.blocks[0].parameters()]
    monitor, summary = StabilityMonitor(interval=3, flush_every=2), RunSummary(hparams=False)
    trainer = fit(tmp_path, text_corpus, [monitor, summary], max_steps=4, module=module)
    run_dir = trainer.logger.log_dir
    events = EventAccumulator(run_dir, size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    stability_tags = [t for t in tags["scalars"] if t.startswith("stability/")]
    assert {
        "stability/grad_norm/block_00",
        "stability/grad_norm/embeddings",
        "stability/update_ratio/block_01",
        "stability/stream_rms/block_01",
        "stability/delta_ratio/block_00_attn",
        "stability/delta_ratio/block_01_mlp",
        "stability/attn_logit_max/block_00",
        "stability/logit_max",
        "stability/log_z",
        "stability/dead_fraction/block_00",
        "stability/nonfinite",
        "stability/spikes",
    } <= set(stability_tags)
    assert [s for s, _ in scalars(run_dir, "stability/grad_norm/block_00")] == [0, 3]  # step 0 before any update
    # Each per-layer curve lands on one custom-scalars chart; the 0/1 flags on none (fit.stability.layout: why).
    assert "custom_scalars__config__" in tags["tensors"]
    regexes = [r for category in CUSTOM_SCALARS_LAYOUT.values() for _, (_, rs) in category.items() for r in rs]
    flags = set(divergence_flags(None)) | {"stability/nonfinite"}
    for tag in stability_tags:
        charted = any(re.search(r, tag) for r in regexes)
        assert charted != (tag in flags), f"{tag} is {'on a chart' if charted else 'on no chart'}"
    # Every tag logged is one of the definitions (andrea_lab/runs/tags.py, the probe's metrics); Lightning adds epoch.
    defined = {*andrea_tags.ALL, probe.PROBE_SECONDS, "epoch"}
    assert [t for t in tags["scalars"] if t not in defined and not any(m.owns(t) for m in probe.METRICS.values())] == []
    # AdamW's first step moves every weight by lr·sign(g) (plus a tiny decay): ‖ΔW‖/‖W‖ ≈ lr·sqrt(n)/‖W‖.
    n = sum(p.numel() for p in block0)
    expected = 1e-3 * math.sqrt(n) / torch.linalg.vector_norm(torch.stack([p.norm() for p in block0])).item()
    ratio = dict(scalars(run_dir, "stability/update_ratio/block_00"))[0]
    assert ratio == pytest.approx(expected, rel=0.03)
    # summary.json keeps the last probe's attention extremes (andrea compare reports them).
    recorded = json.loads(summary.path.read_text())["probe"]
    assert recorded["step"] == 3
    assert recorded["attn_logit_max_final"] == pytest.approx(
        max(dict(scalars(run_dir, f"stability/attn_logit_max/block_{i:02d}"))[3] for i in range(2)), rel=1e-6
    )
    assert recorded["attn_entropy_min_final"] == pytest.approx(
        min(dict(scalars(run_dir, f"stability/attn_entropy/block_{i:02d}_min"))[3] for i in range(2)), rel=1e-6
    )


def test_a_nonfinite_loss_that_stops_the_run_is_a_divergence(tmp_path, text_corpus):
    module = NaNAtStep(bad_steps=(3,))  # on_nonfinite=stop
    monitor, summary = StabilityMonitor(interval=0, flush_every=10), RunSummary()
    with pytest.raises(DivergenceError):
        fit(tmp_path, text_corpus, [monitor, summary], max_steps=20, module=module)
    assert (monitor.divergence.step, monitor.divergence.kind) == (3, "nonfinite")
    assert summary.summary.status == "diverged"
    assert summary.summary.divergence == {"step": 3, "kind": "nonfinite"}
    assert json.loads(summary.path.read_text())["status"] == "diverged"
    flags = scalars(summary.path.parent, "stability/nonfinite")
    assert (3, 1.0) in flags, "the step that raised is flushed and flagged"
    # The record's point is written by a second events file; files are read in name order, which is the
    # process's writer count (".9" after ".10"), so the points are compared by step.
    assert max(flags) == (4, 1.0), "and the record's final point (at its step count) agrees"


def test_a_nonfinite_stop_after_a_stuck_declaration_is_a_done_divergence(tmp_path, text_corpus):
    # Going on past a divergence (stop_on_divergence false), then stopped by the non-finite guard: the run is done.
    module = NaNAtStep(bad_steps=(3,))
    monitor = StabilityMonitor(interval=0, flush_every=1, unigram_loss=0.0, stuck_after=0, stuck_patience=1)
    summary = RunSummary()
    with pytest.raises(DivergenceError):
        fit(tmp_path, text_corpus, [monitor, summary], max_steps=20, module=module)
    assert monitor.divergence.kind == "stuck_at_unigram"
    assert json.loads(summary.path.read_text())["status"] == "diverged"


def test_a_skipped_nonfinite_step_is_flagged_but_not_a_divergence(tmp_path, text_corpus):
    module = NaNAtStep(bad_steps=(3,), on_nonfinite="skip", max_skipped_steps=5)
    monitor, summary = StabilityMonitor(interval=0, flush_every=1), RunSummary()
    with pytest.warns(RuntimeWarning, match="update skipped"):
        trainer = fit(tmp_path, text_corpus, [monitor, summary], max_steps=6, module=module)
    flags = dict(scalars(trainer.logger.log_dir, "stability/nonfinite"))
    assert flags[3] == 1.0 and flags[2] == 0.0 and flags[4] == 0.0
    assert monitor.nonfinite_steps == 1 and monitor.divergence is None
    assert summary.summary.status == "finished" and trainer.global_step == 6


def test_stuck_at_unigram_stops_the_run_when_asked(tmp_path, text_corpus):
    # A unigram level below any loss the model reaches here: every step counts as "stuck".
    monitor = StabilityMonitor(
        interval=0, flush_every=1, unigram_loss=0.5, stuck_after=0, stuck_patience=3, stop_on_divergence=True
    )
    summary = RunSummary()
    trainer = fit(tmp_path, text_corpus, [monitor, summary], max_steps=20)
    assert (monitor.divergence.step, monitor.divergence.kind) == (0, "stuck_at_unigram")
    assert trainer.global_step == 3, "stop_on_divergence ends the run at the step it is declared"
    assert summary.summary.status == "diverged" and summary.summary.unigram_loss == 0.5


def test_disabled_monitor_does_nothing(tmp_path, text_corpus):
    monitor = StabilityMonitor(enabled=False)
    trainer = fit(tmp_path, text_corpus, [monitor], max_steps=2)
    events = EventAccumulator(trainer.logger.log_dir)
    events.Reload()
    assert not [t for t in events.Tags()["scalars"] if t.startswith("stability/")]
    assert monitor.grad_norms == [] and monitor.last_probe == {}


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(interval=-1),
        dict(flush_every=0),
        dict(probe="test"),
        dict(spike_threshold=0.0),
        dict(stuck_patience=0),
        dict(final_margin=0),
        dict(blowup_margin=-1.0),
    ],
)
def test_bad_settings_fail_at_construction(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs)).split("_")[0]):
        StabilityMonitor(**kwargs)


def test_the_monitor_takes_each_optimizer_steps_norm_from_the_modules_guard(tmp_path, text_corpus):
    """AndreaLM's guard is a callback of the module, so Lightning runs it after this trainer callback: it
    measures the norm in on_before_optimizer_step, the monitor reads it at batch end, once per optimizer
    step and never on a micro-batch that does not step (the guard clears it at each batch's start)."""
    monitor = StabilityMonitor(interval=0, flush_every=3, unigram_loss=5.0)
    trainer = fit(tmp_path, text_corpus, [monitor], max_steps=4, accumulate_grad_batches=2)
    events = EventAccumulator(trainer.logger.log_dir)
    events.Reload()
    logged = [e.value for e in events.Scalars(andrea_tags.TRAIN_GRAD_NORM)]
    assert len(logged) == 4 and all(math.isfinite(g) and g > 0 for g in logged)
    assert monitor.grad_norms == pytest.approx(logged, rel=1e-6)


@pytest.mark.parametrize("curve, stops", [("rise", False), ("plateau", True)])
def test_stop_on_divergence_follows_a_rise_to_the_end_but_stops_on_the_plateau(curve, stops):
    """A trained run's rise may still come back (a spike, andrea_lab.runs.outcome), so stop_on_divergence does not
    stop at its onset; a run stuck on the unigram plateau is stopped as before."""
    from types import SimpleNamespace

    monitor = StabilityMonitor(interval=0, flush_every=1, unigram_loss=3.0, stop_on_divergence=True, precursors=False)
    monitor.divergence_detector.unigram_loss = 3.0
    trainer = SimpleNamespace(loggers=[], is_global_zero=True, should_stop=False)
    trained = [2.0 + 3.5 * math.exp(-t / 30) for t in range(300)] + [3.4] * 100
    losses = trained if curve == "rise" else [3.0] * 150
    for step, loss in enumerate(losses):
        monitor._pending.append((step, torch.tensor(loss), None))
        monitor.flush(trainer)
    assert monitor.divergence is not None and trainer.should_stop is stops
    assert (monitor.divergence_detector.rise is not None) is not stops
