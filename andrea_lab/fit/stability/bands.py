"""Which signal gave way first: running bands of the probe's signals, and the one that left its band
earliest before a divergence or a loss spike (plain Python, fed one probe at a time; no torch).

Every signal (one probe value: ``attn_logit_max_head/block_00_h1``) has a band on the log scale,
``log|x|``: an exponential moving mean and variance over its probes, so a signal that drifts slowly stays
inside while one that grows by a factor (attention logits, an update's size) leaves. A signal that is a
logarithm already and may change sign (log Z) has its band on its own scale (``linear``). A value is
*out* when ``|log|x| − mean| > width · max(sd, min_sd)``, judged once the band has seen ``warmup`` probes
and the step is at least ``after`` (early training moves everything at once). While a signal is out its
band is frozen, so a new level is not learnt as normal; back inside, the excursion ends. A non-finite
value is out.

For an event at step E (a divergence's onset, a spike's start), the signals whose excursion began at or
before E, not more than ``horizon`` steps earlier, and that were still out within ``lookback`` steps of
E are the candidates; the earliest start gave way first, ties broken by the larger deviation. Its *lead*
is E − start, in steps: a multiple of the probe interval, the resolution of the record.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Optional

from andrea_lab.errors import reading_checkpoint_state


def _log_magnitude(value: float) -> float:
    return math.log(max(abs(value), 1e-12))


@dataclass
class Band:
    """One signal's running band and its excursions ((start, end or None, deviation at start) in steps)."""

    mean: float = 0.0
    var: float = 0.0
    seen: int = 0
    out_since: Optional[int] = None
    out_deviation: float = 0.0
    excursions: list[list[Any]] = field(default_factory=list)


@dataclass(frozen=True)
class GaveWay:
    """The first signal out of its band before an event, and the others that were out (earliest first)."""

    event: str  # "divergence" or "spike"
    step: int
    signal: Optional[str]  # None: no signal left its band before the loss did
    left_band_at: Optional[int]
    lead_steps: Optional[int]
    also: tuple[tuple[str, int], ...] = ()  # (signal, left_band_at) of the next ones, up to four

    def as_dict(self) -> dict[str, Any]:
        found = asdict(self)
        found["also"] = [list(item) for item in self.also]
        return found


class SignalBands:
    """Running bands of named signals (see the module doc).

    Args:
        decay: EMA decay of a band's mean and variance per probe.
        width: How many standard deviations (on log|x|) make a value out of band.
        min_sd: The band's smallest half-width per ``width``, on log|x| (0.05: a 5 % change is never news).
        warmup: Probes a band must have seen before it judges.
        after: The first step at which a value can be out (the monitor passes its stuck window, the warmup).
        horizon: An excursion that began more than this many steps before an event is not its precursor.
        lookback: An excursion that ended more than this many steps before an event is not its precursor.
        linear: Signals (by the metric name before the ``/``) whose band is on the value itself, not log|x|.
    """

    def __init__(
        self,
        decay: float = 0.9,
        width: float = 4.0,
        min_sd: float = 0.05,
        warmup: int = 5,
        after: int = 0,
        horizon: int = 500,
        lookback: int = 100,
        linear: tuple[str, ...] = (),
    ):
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"band decay must be in [0, 1), got {decay!r}")
        if not (width > 0 and min_sd > 0):
            raise ValueError(f"band width and min_sd must be > 0, got {width!r} and {min_sd!r}")
        if warmup < 1 or after < 0 or horizon < 0 or lookback < 0:
            raise ValueError(
                "band warmup must be >= 1 and after, horizon, lookback >= 0; "
                f"got {warmup!r}, {after!r}, {horizon!r}, {lookback!r}"
            )
        self.decay, self.width, self.min_sd, self.warmup = float(decay), float(width), float(min_sd), int(warmup)
        self.after, self.horizon, self.lookback = int(after), int(horizon), int(lookback)
        self.linear = tuple(linear)
        self.bands: dict[str, Band] = {}

    def update(self, step: int, values: dict[str, float]) -> list[str]:
        """Feed one probe's values; return the signals that left their band at this step."""
        left = []
        for name, value in values.items():
            band = self.bands.setdefault(name, Band())
            if self._judge(band, int(step), float(value), name.split("/", 1)[0] in self.linear):
                left.append(name)
        return left

    def _judge(self, band: Band, step: int, value: float, linear: bool) -> bool:
        finite = math.isfinite(value)
        x = (value if linear else _log_magnitude(value)) if finite else math.inf
        deviation = math.inf if not finite else abs(x - band.mean) / max(math.sqrt(band.var), self.min_sd)
        judging = band.seen >= self.warmup and step >= self.after
        if judging and deviation > self.width:
            if band.out_since is None:
                band.out_since, band.out_deviation = step, deviation
                band.excursions.append([step, None, deviation])
                return True
            return False
        if band.out_since is not None:  # back inside: the excursion ends here
            band.excursions[-1][1] = step
            band.out_since = None
        if finite:
            if band.seen == 0:
                band.mean, band.var = x, 0.0
            else:
                delta = x - band.mean
                band.mean += (1.0 - self.decay) * delta
                band.var = self.decay * (band.var + (1.0 - self.decay) * delta * delta)
            band.seen += 1
        return False

    def attribute(self, event: str, step: int) -> GaveWay:
        """The signal that gave way first before the event at ``step`` (see the module doc)."""
        candidates = []
        for name, band in self.bands.items():
            for start, end, deviation in band.excursions:
                if start <= step and start >= step - self.horizon and (end is None or end >= step - self.lookback):
                    candidates.append((start, -deviation, name))
        if not candidates:
            return GaveWay(event, int(step), None, None, None)
        candidates.sort()
        (start, _, name), rest = candidates[0], candidates[1:5]
        return GaveWay(event, int(step), name, start, int(step) - start, tuple((n, s) for s, _, n in rest))

    def state_dict(self) -> dict[str, Any]:
        return {name: asdict(band) for name, band in self.bands.items()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.bands = {name: Band(**{k: v for k, v in band.items()}) for name, band in state.items()}


class GaveWayRecorder:
    """A run's bands and its record of what gave way first: the StabilityMonitor's part, kept in its checkpoint.

    Args:
        keep: Which probe values are signals (:func:`andrea_lab.fit.stability.precursors.is_signal`).
        max_spikes: Spikes recorded at most (the first ones); a divergence is always recorded.
        band_options: :class:`SignalBands`' arguments.
    """

    def __init__(self, keep: Callable[[str], bool], max_spikes: int, **band_options: Any):
        SignalBands(**band_options)  # bad settings fail here, at construction
        self.keep, self.max_spikes, self.band_options = keep, int(max_spikes), band_options
        self.bands = SignalBands(**band_options)
        self.records: list[GaveWay] = []

    def feed(self, step: int, values: dict[str, float]) -> None:
        self.bands.update(step, {k: v for k, v in values.items() if self.keep(k)})

    def attribute(self, event: str, step: int) -> Optional[GaveWay]:
        """Record (and return) which signal gave way first before this event; None past the spike bound."""
        if event == "spike" and sum(r.event == "spike" for r in self.records) >= self.max_spikes:
            return None
        record = self.bands.attribute(event, step)
        self.records.append(record)
        return record

    def state_dict(self) -> dict[str, Any]:
        return {"bands": self.bands.state_dict(), "records": [r.as_dict() for r in self.records]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore from a checkpoint; a malformed state (a handed or damaged file) is one CheckpointStateError."""
        with reading_checkpoint_state("stability monitor's gave-way"):
            self.bands.load_state_dict(dict(state.get("bands", {})))
            self.records = [GaveWay(**{**r, "also": tuple(map(tuple, r["also"]))}) for r in state.get("records", [])]
