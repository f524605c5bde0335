"""Running bands of the precursor signals, and which one gave way first, on synthetic probe sequences."""

from __future__ import annotations

import math
import random

import pytest

from andrea_lab.fit.stability import precursors
from andrea_lab.fit.stability.bands import GaveWay, GaveWayRecorder, SignalBands


def noisy(rng: random.Random, level: float, spread: float = 0.05) -> float:
    return level * math.exp(rng.gauss(0, spread))


def feed_steady(bands: SignalBands, steps: range, levels: dict[str, float], seed: int = 0) -> None:
    rng = random.Random(seed)
    for step in steps:
        bands.update(step, {name: noisy(rng, level) for name, level in levels.items()})


def test_a_noisy_steady_or_slowly_drifting_signal_stays_in_its_band():
    bands = SignalBands(warmup=5)
    rng = random.Random(1)
    for probe in range(300):
        step = probe * 10
        left = bands.update(step, {"steady": noisy(rng, 3.0), "drift": noisy(rng, 1e-3 * 1.01**probe)})
        assert left == [], (step, left)
    assert bands.attribute("spike", 2990).signal is None


def test_a_signal_that_grows_by_a_factor_leaves_and_is_named_with_its_lead():
    bands = SignalBands(warmup=5)
    feed_steady(bands, range(0, 200, 10), {"attn": 20.0, "update": 1e-3})
    assert bands.update(200, {"attn": 400.0, "update": 1e-3}) == ["attn"]
    bands.update(210, {"attn": 8000.0, "update": 1e-3})
    assert bands.update(220, {"attn": 1e5, "update": 0.05}) == ["update"]
    record = bands.attribute("divergence", 230)
    assert (record.signal, record.left_band_at, record.lead_steps) == ("attn", 200, 30)
    assert record.also == (("update", 220),)
    assert record.as_dict()["also"] == [["update", 220]]


def test_ties_go_to_the_larger_deviation_and_old_or_finished_excursions_do_not_count():
    bands = SignalBands(warmup=5, horizon=100, lookback=20)
    feed_steady(bands, range(0, 100, 10), {"a": 1.0, "b": 1.0})
    bands.update(100, {"a": 3.0, "b": 30.0})
    assert bands.attribute("spike", 100).signal == "b", "same step: the larger jump first"
    bands.update(110, {"a": 1.0, "b": 1.0})  # both back inside at 110
    assert bands.attribute("spike", 120).signal == "b"  # ended 10 steps before: within the lookback
    assert bands.attribute("spike", 200).signal is None, "ended 90 steps before the event: not its precursor"
    fresh = SignalBands(warmup=5, horizon=100)
    feed_steady(fresh, range(0, 100, 10), {"a": 1.0})
    fresh.update(100, {"a": 50.0})  # out for good from step 100
    assert fresh.attribute("spike", 150).signal == "a" and fresh.attribute("spike", 250).signal is None


def test_nothing_is_judged_before_warmup_or_before_the_after_step_and_nonfinite_is_out():
    bands = SignalBands(warmup=3, after=50)
    assert bands.update(0, {"x": 1.0}) == [] and bands.update(10, {"x": 1000.0}) == []
    feed_steady(bands, range(20, 60, 10), {"x": 1.0})
    assert bands.update(60, {"x": math.nan}) == ["x"]
    assert bands.attribute("divergence", 60) == GaveWay("divergence", 60, "x", 60, 0, ())


def test_a_linear_signal_leaves_when_it_changes_sign_or_level():
    """log Z is a logarithm already: its band is on the value, so 5 -> -5 nats is news (on log|x| it is not)."""
    logged = SignalBands(warmup=5)
    linear = SignalBands(warmup=5, linear=("log_z",))
    for bands in (logged, linear):
        feed_steady(bands, range(0, 100, 10), {"log_z": 5.0})
    assert logged.update(100, {"log_z": -5.0}) == []
    assert linear.update(100, {"log_z": -5.0}) == ["log_z"]


def test_adams_eps_share_leaves_its_band_when_a_real_share_falls_below_eps_not_at_its_first_coordinate():
    """A share that sits at 0: on log|x| its first coordinate below ε would be twenty sds out, and every run
    would name it as the first signal to give way. On the value (the monitor's linear signals) it leaves when
    a real share of the coordinates falls below ε."""
    signal = f"{precursors.adam_eps_share.name}/head"
    assert precursors.adam_eps_share.name in precursors.LINEAR_SIGNALS
    for linear, first_coordinate_is_news in (((), True), (precursors.LINEAR_SIGNALS, False)):
        bands = SignalBands(warmup=5, linear=linear)
        feed_steady(bands, range(0, 100, 10), {signal: 0.0})
        assert (bands.update(100, {signal: 0.001}) == [signal]) is first_coordinate_is_news
    assert bands.update(110, {signal: 0.4}) == [signal]


def test_the_bands_round_trip_through_a_checkpoint_state():
    first = SignalBands(warmup=5)
    feed_steady(first, range(0, 100, 10), {"x": 2.0})
    first.update(100, {"x": 200.0})
    second = SignalBands(warmup=5)
    second.load_state_dict(first.state_dict())
    assert second.attribute("spike", 110) == first.attribute("spike", 110)
    assert second.update(110, {"x": 2.0}) == first.update(110, {"x": 2.0})


@pytest.mark.parametrize(
    "kwargs", [{"decay": 1.0}, {"width": 0}, {"min_sd": -1}, {"warmup": 0}, {"horizon": -1}, {"after": -5}]
)
def test_absurd_band_settings_are_refused(kwargs):
    with pytest.raises(ValueError, match="band"):
        SignalBands(**kwargs)


def test_the_recorder_keeps_only_signals_bounds_spikes_and_round_trips():
    recorder = GaveWayRecorder(lambda key: key.startswith("sig"), max_spikes=2, warmup=5)
    feed = [(step, {"sig": 1.0, "other": 1.0}) for step in range(0, 100, 10)]
    for step, values in feed:
        recorder.feed(step, values)
    recorder.feed(100, {"sig": 100.0, "other": 1e6})
    assert set(recorder.bands.bands) == {"sig"}
    first = recorder.attribute("spike", 100)
    assert first.signal == "sig" and recorder.attribute("spike", 110) is not None
    assert recorder.attribute("spike", 120) is None, "spikes past the bound are not recorded"
    assert recorder.attribute("divergence", 130).signal == "sig", "a divergence always is"
    again = GaveWayRecorder(lambda key: True, max_spikes=2, warmup=5)
    again.load_state_dict(recorder.state_dict())
    assert again.records == recorder.records and again.bands.state_dict() == recorder.bands.state_dict()
    fresh = GaveWayRecorder(lambda key: True, max_spikes=2)
    fresh.load_state_dict({})  # a checkpoint from before the record
    assert fresh.records == [] and fresh.bands.bands == {}


@pytest.mark.parametrize(
    "state",
    [{"bands": "x"}, {"bands": {"s": {"mean": 1, "nope": 2}}}, {"records": [{"event": "spike"}]}, {"records": 7}, []],
)
def test_a_malformed_recorder_state_is_one_value_error(state):
    with pytest.raises(ValueError, match="gave-way state in the checkpoint is malformed"):
        GaveWayRecorder(lambda key: True, max_spikes=2).load_state_dict(state)
