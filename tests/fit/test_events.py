"""Spike and divergence detection on synthetic loss sequences."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_lab.fit.stability.events import (
    BLEW_UP,
    FINAL_ABOVE_BEST,
    LOSS_ROSE,
    NONFINITE,
    STUCK_AT_UNIGRAM,
    TRAINED_THEN_DIVERGED,
    Divergence,
    DivergenceDetector,
    SpikeDetector,
    divergence_flags,
    unigram_entropy,
)
from andrea_lab.runs import tags


def falling_curve(steps: int, start: float = 5.5, end: float = 2.0, noise: float = 0.05, seed: int = 0) -> list[float]:
    """A healthy training curve: exponential approach from ``start`` to ``end`` with a little noise."""
    rng = random.Random(seed)
    return [end + (start - end) * math.exp(-t / 30) + rng.gauss(0, noise) for t in range(steps)]


def feed(detector, losses, first_step: int = 0):
    return [detector.update(first_step + i, loss) for i, loss in enumerate(losses)]


# ----------------------------------------------------------------- spikes


@pytest.mark.parametrize("decay", [0.9, 0.95, 0.99])
def test_a_healthy_falling_curve_has_no_spikes(decay):
    detector = SpikeDetector(threshold=0.5, decay=decay, warmup=20)
    feed(detector, falling_curve(500))
    assert detector.count == 0


def test_an_early_spike_during_the_fast_fall_is_seen_with_the_default_decay():
    losses = falling_curve(300)
    losses[40] += 1.5
    default = SpikeDetector()
    feed(default, losses)
    assert default.steps == [40]
    slow = SpikeDetector(decay=0.99)  # a 100-step EMA lags ~3 nats above the curve here and misses it
    feed(slow, losses)
    assert slow.count == 0


def test_one_excursion_is_one_spike_at_its_first_step():
    losses = [3.0] * 100
    losses[60:64] = [4.0, 4.2, 3.9, 3.7]  # four steps above EMA + 0.5: one spike
    detector = SpikeDetector(threshold=0.5, decay=0.99, warmup=20)
    started = feed(detector, losses)
    assert detector.count == 1 and detector.steps == [60]
    assert started.index(True) == 60 and started.count(True) == 1


def test_two_separate_excursions_are_two_spikes():
    losses = [3.0] * 200
    losses[50] = 4.0
    losses[150] = 4.0
    detector = SpikeDetector(threshold=0.5)
    feed(detector, losses)
    assert detector.count == 2 and detector.steps == [50, 150]


def test_a_jump_below_the_threshold_is_not_a_spike():
    losses = [3.0] * 100
    losses[60] = 3.45
    detector = SpikeDetector(threshold=0.5)
    feed(detector, losses)
    assert detector.count == 0


def test_no_spike_during_the_warm_in():
    losses = [3.0] * 10 + [5.0] + [3.0] * 10
    detector = SpikeDetector(threshold=0.5, warmup=20)
    feed(detector, losses)
    assert detector.count == 0
    assert SpikeDetector(threshold=0.5, warmup=5).update(0, 3.0) is False


def test_nan_is_not_a_spike_and_does_not_poison_the_ema():
    losses = [3.0] * 50 + [float("nan"), float("inf")] + [3.0] * 10 + [4.0]
    detector = SpikeDetector(threshold=0.5)
    feed(detector, losses)
    assert detector.ema is not None and math.isfinite(detector.ema)
    assert detector.count == 1 and detector.steps == [62]


def test_spike_detector_state_round_trips():
    first, second = SpikeDetector(), SpikeDetector()
    losses = [3.0] * 40 + [4.0] + [3.0] * 5
    feed(first, losses[:30])
    second.load_state_dict(first.state_dict())
    feed(first, losses[30:], 30)
    feed(second, losses[30:], 30)
    assert first.state_dict() == second.state_dict() and first.count == 1


@pytest.mark.parametrize("kwargs", [dict(threshold=0), dict(decay=1.0), dict(warmup=0)])
def test_spike_detector_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        SpikeDetector(**kwargs)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=20.0), min_size=1, max_size=200))
def test_spike_count_never_exceeds_the_excursions(losses):
    detector = SpikeDetector(threshold=0.5, warmup=1)
    started = feed(detector, losses)
    assert detector.count == sum(started) == len(detector.steps)
    assert detector.count <= (len(losses) + 1) // 2  # an excursion needs a non-spike step between


# ------------------------------------------------------------- divergence

UNIGRAM = 3.0


def test_nan_loss_is_a_nonfinite_divergence_at_its_step():
    detector = DivergenceDetector(unigram_loss=UNIGRAM)
    results = feed(detector, [5.0, 4.0, 3.5, float("nan"), 3.0])
    assert results[3] == Divergence(3, NONFINITE)
    assert detector.divergence == Divergence(3, NONFINITE)
    assert results[4] is None, "the first divergence is kept"


def test_infinite_loss_is_nonfinite_too():
    detector = DivergenceDetector()
    feed(detector, [5.0, float("inf")])
    assert detector.divergence == Divergence(1, NONFINITE)


def test_a_nonfinite_gradient_is_reported_as_nonfinite():
    detector = DivergenceDetector()
    assert detector.nonfinite(12) == Divergence(12, NONFINITE)
    assert detector.nonfinite(13) is None and detector.divergence.step == 12


def test_stuck_at_the_unigram_loss_is_a_divergence_from_the_start_of_the_plateau():
    # Falls from ln(257) to the unigram level and stays there (with noise) without ever producing a NaN:
    # the post-norm-at-too-high-a-learning-rate failure.
    rng = random.Random(1)
    losses = [5.5 - 0.25 * t for t in range(10)] + [UNIGRAM + 0.02 + rng.gauss(0, 0.05) for _ in range(200)]
    detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_after=20, stuck_patience=100, stuck_margin=0.1)
    feed(detector, losses)
    assert detector.divergence is not None
    assert detector.divergence.kind == STUCK_AT_UNIGRAM
    # The check starts at stuck_after (20); the smoothed loss still settles onto the plateau for a few
    # steps after that, and the stretch starts once it has stopped falling.
    assert 20 <= detector.divergence.step <= 60, detector.divergence


def test_stuck_requires_patience_consecutive_steps():
    losses = [UNIGRAM] * 99
    detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_patience=100)
    feed(detector, losses)
    assert detector.divergence is None
    detector.update(99, UNIGRAM)
    assert detector.divergence == Divergence(0, STUCK_AT_UNIGRAM)


def test_a_dip_below_the_unigram_level_resets_the_patience():
    # A dip below the stuck line (unigram - 0.1) that is not yet training (unigram - 0.5: trained_margin).
    losses = [UNIGRAM] * 80 + [UNIGRAM - 0.3] * 30 + [UNIGRAM] * 80
    detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_patience=100, stuck_decay=0.0)
    feed(detector, losses)
    assert detector.divergence is None


def test_a_slow_run_still_descending_to_the_unigram_level_is_not_stuck():
    # A deep, narrow model at a low learning rate (measured: the depth suite at lr 1e-3) takes ~150
    # steps to come down from ln(257) to the unigram level: above it all along, but not on a plateau.
    losses = [5.5 - (5.5 - UNIGRAM) * t / 150 for t in range(150)]
    detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_after=40, stuck_patience=100)
    feed(detector, losses)
    assert detector.divergence is None
    feed(detector, [UNIGRAM] * 150, first_step=150)  # ...and then it does stop there
    assert detector.divergence is not None and detector.divergence.step >= 150


def test_a_healthy_run_that_passes_the_unigram_level_is_not_stuck():
    detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_after=0, stuck_patience=100)
    feed(detector, falling_curve(1000, start=5.5, end=1.5))
    assert detector.divergence is None


def blow_up(steps: int, seed: int = 0) -> list[float]:
    """A run that never trains: from ln(257) its loss climbs within 50 steps to 20-40 nats and stays there
    (measured: a QK-normed d64 model at a peak LR of 1, docs/stability.md)."""
    rng = random.Random(seed)
    return [5.5 + 0.5 * t for t in range(50)] + [30.0 + rng.uniform(-10, 10) for _ in range(steps - 50)]


def test_a_run_whose_loss_went_up_from_where_it_started_blew_up_rather_than_stuck():
    detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_after=20, stuck_patience=100)
    feed(detector, blow_up(400))
    assert detector.divergence is not None and detector.divergence.kind == BLEW_UP
    # The stretch restarts while the smoothed loss still improves; it ends up starting within the blow-up.
    assert 20 <= detector.divergence.step <= 300, detector.divergence
    assert detector.initial == 5.5


def test_a_plateau_then_a_blow_up_is_whichever_held_for_the_patience_first():
    # On the plateau for 100 steps first: stuck (the first failure is kept); for 60: the stuck stretch ends where
    # the loss crosses the blow-up line, and the run blew up from there.
    for plateau, expected in ((120, Divergence(10, STUCK_AT_UNIGRAM)), (60, Divergence(70, BLEW_UP))):
        losses = [5.5 - 0.25 * t for t in range(10)] + [UNIGRAM] * plateau + [30.0] * 200
        detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_patience=100, stuck_decay=0.0)
        feed(detector, losses)
        assert detector.divergence == expected, plateau


def test_the_blow_up_margin_separates_the_kinds():
    # Held 0.8 nat above where it started: at margin 1 that is still "at/above the unigram level" (stuck, from
    # step 0); at margin 0.5 it is above the blow-up line from step 1.
    losses = [5.5] + [6.3] * 200
    for margin, expected in ((1.0, Divergence(0, STUCK_AT_UNIGRAM)), (0.5, Divergence(1, BLEW_UP))):
        detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_patience=100, stuck_decay=0.0, blowup_margin=margin)
        feed(detector, losses)
        assert detector.divergence == expected, margin


def test_the_blow_up_state_round_trips_and_old_states_are_judged_as_before():
    losses = blow_up(60)  # 5.5, 6.0, 6.5, 7.0, ...: on or above the line (6.5) from step 2
    first = DivergenceDetector(unigram_loss=UNIGRAM, stuck_patience=100, stuck_decay=0.0)
    feed(first, losses)
    assert first.divergence is None and first.blowup_since == 2
    second = DivergenceDetector(unigram_loss=UNIGRAM, stuck_patience=100, stuck_decay=0.0)
    second.load_state_dict(first.state_dict())
    feed(second, [30.0] * 100, first_step=len(losses))
    assert second.divergence == Divergence(2, BLEW_UP)
    # A checkpoint from before the rule has no first loss, so no blow-up line: the run is stuck, as it was then.
    old = {k: v for k, v in first.state_dict().items() if k not in ("initial", "blowup_since", "blowup_steps")}
    third = DivergenceDetector(unigram_loss=UNIGRAM, stuck_patience=100, stuck_decay=0.0)
    third.load_state_dict(old)
    feed(third, [30.0] * 100, first_step=len(losses))
    assert third.divergence == Divergence(len(losses), STUCK_AT_UNIGRAM)


def test_without_a_unigram_level_only_nonfinite_counts():
    detector = DivergenceDetector(unigram_loss=None, stuck_patience=1)
    feed(detector, [9.0] * 50)
    assert detector.divergence is None


def test_final_validation_far_above_the_best_is_a_divergence():
    detector = DivergenceDetector(final_margin=1.0)
    assert detector.check_final(500, final_val_loss=3.9, best_val_loss=3.0) is None
    assert detector.check_final(500, final_val_loss=4.0, best_val_loss=3.0) == Divergence(500, FINAL_ABOVE_BEST)


def test_final_check_keeps_an_earlier_divergence_and_catches_a_nan_final():
    detector = DivergenceDetector(unigram_loss=UNIGRAM)
    detector.update(3, float("nan"))
    assert detector.check_final(9, 10.0, 2.0) is None and detector.divergence.kind == NONFINITE
    fresh = DivergenceDetector()
    assert fresh.check_final(9, float("nan"), 2.0) == Divergence(9, NONFINITE)
    assert DivergenceDetector().check_final(9, None, None) is None


def test_divergence_detector_state_round_trips():
    first = DivergenceDetector(unigram_loss=UNIGRAM, stuck_patience=10, stuck_decay=0.0)
    feed(first, [UNIGRAM] * 6)
    second = DivergenceDetector(unigram_loss=UNIGRAM, stuck_patience=10, stuck_decay=0.0)
    second.load_state_dict(first.state_dict())
    feed(second, [UNIGRAM] * 4, 6)
    assert second.divergence == Divergence(0, STUCK_AT_UNIGRAM)


# ------------------------------------------------------ trained, then diverged


def test_a_run_that_trained_and_then_rose_is_trained_then_diverged_from_its_onset():
    # Trains to ~2.0 (well below the unigram 3.0), then at step 400 the loss jumps to 3.4 and stays there.
    losses = falling_curve(400, end=2.0) + [3.4] * 100
    detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_after=40, rise_margin=0.5, rise_patience=50)
    feed(detector, losses)
    divergence = detector.divergence
    assert divergence is not None and (divergence.kind, divergence.cause) == (TRAINED_THEN_DIVERGED, LOSS_ROSE)
    # The smoothed loss (EMA 0.9) crosses best + 0.5 a few steps after the jump: that is the onset.
    assert 400 <= divergence.step <= 410, divergence
    assert divergence.as_dict() == {"step": divergence.step, "kind": TRAINED_THEN_DIVERGED, "cause": LOSS_ROSE}


def test_a_trained_run_back_on_the_unigram_plateau_is_not_called_stuck():
    losses = falling_curve(300, end=2.0) + [UNIGRAM] * 300
    detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_after=0, stuck_patience=100, rise_patience=200)
    feed(detector, losses)
    assert detector.divergence is not None and detector.divergence.kind == TRAINED_THEN_DIVERGED


def test_a_spike_that_recovers_within_the_patience_is_not_a_divergence():
    losses = falling_curve(300, end=2.0) + [4.0] * 20 + [2.0] * 200
    detector = DivergenceDetector(unigram_loss=UNIGRAM, rise_patience=50)
    feed(detector, losses)
    assert detector.divergence is None
    slower = DivergenceDetector(unigram_loss=UNIGRAM, rise_patience=10)
    feed(slower, losses)
    assert slower.divergence is not None and slower.divergence.kind == TRAINED_THEN_DIVERGED


def test_a_run_still_above_the_trained_line_is_never_trained_then_diverged():
    # Hovers just below the stuck line but never trained_margin below the unigram loss: a rise is no divergence
    # of this kind (and not stuck either while it stays below the stuck line).
    losses = [UNIGRAM - 0.2] * 200 + [UNIGRAM - 0.11] * 200
    detector = DivergenceDetector(unigram_loss=UNIGRAM, trained_margin=0.5, rise_margin=0.05, rise_patience=10)
    feed(detector, losses)
    assert detector.divergence is None


@pytest.mark.parametrize("trained, expected", [(False, Divergence(5, NONFINITE)), (True, None)])
def test_a_nan_is_nonfinite_before_training_and_trained_then_diverged_after(trained, expected):
    detector = DivergenceDetector(unigram_loss=UNIGRAM)
    feed(detector, [1.5 if trained else 4.0] * 5)
    found = detector.update(5, float("nan"))
    assert found == (expected or Divergence(5, TRAINED_THEN_DIVERGED, NONFINITE))
    assert DivergenceDetector(unigram_loss=UNIGRAM).nonfinite(3) == Divergence(3, NONFINITE)


def test_the_rise_state_round_trips_and_old_states_still_load():
    losses = falling_curve(300, end=2.0) + [3.5] * 30
    first = DivergenceDetector(unigram_loss=UNIGRAM, rise_patience=50)
    feed(first, losses)
    assert first.rise_since is not None and first.divergence is None
    second = DivergenceDetector(unigram_loss=UNIGRAM, rise_patience=50)
    second.load_state_dict(first.state_dict())
    feed(second, [3.5] * 30, first_step=len(losses))
    assert second.divergence == Divergence(first.rise_since, TRAINED_THEN_DIVERGED, LOSS_ROSE)
    old = {k: v for k, v in first.state_dict().items() if k not in ("best", "rise_since", "rise_steps")}
    third = DivergenceDetector(unigram_loss=UNIGRAM)
    third.load_state_dict(old)
    assert third.best == first.smoothed and third.rise_steps == 0


@pytest.mark.parametrize(
    "option, value",
    [
        ("trained_margin", -0.1),
        ("rise_margin", 0.0),
        ("rise_patience", 0),
        ("rise_margin", math.nan),
        ("blowup_margin", 0.0),
        ("blowup_margin", math.nan),
    ],
)
def test_absurd_rise_settings_are_refused_naming_the_option(option, value):
    with pytest.raises(ValueError, match=option):
        DivergenceDetector(**{option: value})


def test_the_tensorboard_flags_tell_the_kinds_apart():
    flags = (tags.DIVERGED, tags.STUCK, tags.BLEW_UP, tags.TRAINED_THEN_DIVERGED)
    assert divergence_flags(None) == dict.fromkeys(flags, 0.0)
    stuck = divergence_flags(Divergence(10, STUCK_AT_UNIGRAM))
    assert [stuck[flag] for flag in flags] == [1.0, 1.0, 0.0, 0.0]
    blew_up = divergence_flags(Divergence(10, BLEW_UP))
    assert [blew_up[flag] for flag in flags] == [1.0, 0.0, 1.0, 0.0]
    trained = divergence_flags(Divergence(10, TRAINED_THEN_DIVERGED, NONFINITE))
    assert [trained[flag] for flag in flags] == [1.0, 0.0, 0.0, 1.0]
    assert Divergence(3, STUCK_AT_UNIGRAM).as_dict() == {"step": 3, "kind": STUCK_AT_UNIGRAM}


# --------------------------------------------------------------- unigram


def test_unigram_entropy_of_uniform_and_degenerate_distributions():
    assert unigram_entropy([5] * 257) == pytest.approx(math.log(257))
    assert unigram_entropy([0, 10, 0]) == 0.0
    assert unigram_entropy([1, 1, 2]) == pytest.approx(-(2 * 0.25 * math.log(0.25) + 0.5 * math.log(0.5)))
    with pytest.raises(ValueError):
        unigram_entropy([0, 0])


# ----------------------------------------------------------------- outcomes from constructed curves


def outcome_of_curve(losses: list[float], val_every: int = 50):
    """Run the detector over a training curve and classify it as summary.py does, with the validation losses
    taken as the curve's values every ``val_every`` steps (final = the last, best = the lowest)."""
    from andrea_lab.runs.outcome import classify

    detector = DivergenceDetector(unigram_loss=UNIGRAM, stuck_after=40, rise_margin=0.5, rise_patience=50)
    feed(detector, losses)
    val = [loss for loss in losses[::val_every] + losses[-1:] if math.isfinite(loss)]
    final = losses[-1] if math.isfinite(losses[-1]) else None
    divergence = detector.divergence
    if divergence is None:
        return classify(None)
    return classify(divergence.kind, divergence.cause, divergence.step, losses[0], min(val), final, detector.rise)


def test_a_constructed_spike_that_recovers_is_a_spike_with_its_size_and_length():
    losses = falling_curve(400, end=2.0, noise=0.0) + [3.4] * 100 + falling_curve(300, start=3.4, end=2.0, noise=0.0)
    found = outcome_of_curve(losses)
    assert found.kind == "trained" and not found.failed
    assert 400 <= found.rise["step"] <= 410
    assert 1.0 < found.rise["size"] < 1.4  # the smoothed peak above the best before it (3.4 − 2.0 = 1.4 at most)
    assert 100 < found.rise["length"] < 200  # back within the rise margin after the plateau's 100 steps and a fall


def test_a_constructed_rise_that_stays_up_is_a_regression_by_how_much_and_from_when():
    found = outcome_of_curve(falling_curve(400, end=2.0, noise=0.0) + [2.9] * 300)
    assert found.kind == "regressed" and 400 <= found.step <= 410
    assert found.size == pytest.approx(2.9 - 2.0, abs=0.01)


def test_a_constructed_curve_that_never_leaves_the_plateau_is_stuck():
    found = outcome_of_curve(falling_curve(60, start=5.5, end=UNIGRAM, noise=0.0) + [UNIGRAM] * 300)
    assert found.kind == "stuck" and found.step is not None and found.failed


def test_a_constructed_curve_that_goes_non_finite_is_a_blow_up_before_or_after_a_rise():
    assert outcome_of_curve(falling_curve(200, end=2.0) + [math.nan]).kind == "blew_up"
    risen_then_nan = falling_curve(400, end=2.0, noise=0.0) + [3.4] * 100 + [math.inf]
    found = outcome_of_curve(risen_then_nan)
    assert found.kind == "blew_up" and found.step == 500


def test_the_followed_rise_round_trips_and_old_states_know_only_its_onset():
    losses = falling_curve(400, end=2.0, noise=0.0) + [3.4] * 100
    first = DivergenceDetector(unigram_loss=UNIGRAM, stuck_after=40, rise_patience=50)
    feed(first, losses)
    second = DivergenceDetector(unigram_loss=UNIGRAM, stuck_after=40, rise_patience=50)
    second.load_state_dict(first.state_dict())
    feed(second, [2.0] * 100, first_step=500)
    assert second.rise["length"] is not None and first.rise["length"] is None
    old = DivergenceDetector(unigram_loss=UNIGRAM)
    old.load_state_dict({k: v for k, v in first.state_dict().items() if k != "followed_rise"})
    assert old.rise is None and old.divergence == first.divergence


def test_the_outcome_flags_tell_the_three_failures_and_a_recovered_rise_apart():
    from andrea_lab.fit.stability.events import outcome_flags

    stuck = outcome_flags({"kind": "stuck", "step": 150, "size": None, "rise": None})
    assert stuck[f"{tags.OUTCOME}/stuck"] == 1.0 and stuck[f"{tags.OUTCOME}/regressed"] == 0.0
    assert f"{tags.OUTCOME}/size" not in stuck
    spike = outcome_flags({"kind": "trained", "step": None, "size": None, "rise": {"step": 900}})
    assert spike[f"{tags.OUTCOME}/trained"] == 1.0 and spike[f"{tags.OUTCOME}/recovered_rise"] == 1.0
    assert outcome_flags({"kind": "regressed", "step": 9, "size": 0.4, "rise": None})[f"{tags.OUTCOME}/size"] == 0.4
    assert outcome_flags({}) == {}


def test_a_rise_that_came_back_by_the_end_is_recorded_as_a_spike_not_a_divergence():
    """The record keeps no divergence for it (the run is finished) and its outcome keeps the rise; a rise still up
    at the end stays a divergence, a regression by final − best; an interrupted run's rise is left as it was."""
    from andrea_lab.fit.stability.events import record_outcome
    from andrea_lab.fit.summary import run_status  # the status the record then gets

    detector = DivergenceDetector(unigram_loss=3.0, stuck_after=40, rise_patience=50)
    curve = [2.0 + 3.5 * math.exp(-t / 30) for t in range(400)] + [3.4] * 100 + [2.0] * 200
    for step, loss in enumerate(curve):
        detector.update(step, loss)
    divergence, outcome = record_outcome(detector, 5.5, 2.0, (700, 2.01), interrupted=False)
    assert divergence is None and outcome.kind == "trained" and outcome.rise["length"] is not None
    assert run_status(divergence, False, False) == "finished"
    divergence, outcome = record_outcome(detector, 5.5, 2.0, (700, 2.4), interrupted=False)
    assert divergence is detector.divergence and (outcome.kind, outcome.size) == ("regressed", 0.4)
    assert record_outcome(detector, 5.5, 2.0, (700, 2.01), interrupted=True)[0] is detector.divergence
