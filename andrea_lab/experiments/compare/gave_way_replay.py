"""What gave way first, judged again from a finished run's event files with today's band rule.

The StabilityMonitor decides online which signal left its band first before each divergence and spike
(:mod:`andrea_lab.fit.stability.bands`) and writes that into summary.json. When the rule changes (the Adam-ε
share judged on its value rather than log|x|, 2026-12-04), the records of runs made before say what the old
rule saw. The bands are a function of the logged probe values alone, so the decision can be made again:
every ``stability/<signal>`` scalar of the run's events fed in step order into the bands the monitor would
build today (its band settings from the run's config), and each recorded event (its kind and step, from
summary.json) attributed when the replay reaches its step. Replayed under the rule the run was recorded with,
it reproduces the record (:func:`replay_gave_way` with ``linear=``), which is how the replay is checked.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any, Optional, Sequence

from andrea_lab.errors import UsageError
from andrea_lab.experiments.compare.config_variants import run_config
from andrea_lab.experiments.compare.runs_table import read_scalars
from andrea_lab.fit.stability import precursors
from andrea_lab.fit.stability.bands import GaveWay, GaveWayRecorder
from andrea_lab.fit.stability.probe import PREFIX
from andrea_lab.runs.directory import SUMMARY_FILE, read_record


def signal_values(curves: dict[str, list[tuple[int, float]]]) -> dict[int, dict[str, float]]:
    """The band signals of a run's scalars, by step: ``{step: {"log_z": ..., "attn_logit_max_head/...": ...}}``."""
    by_step: dict[int, dict[str, float]] = defaultdict(dict)
    for tag, curve in curves.items():
        name = tag[len(PREFIX) + 1 :] if tag.startswith(PREFIX + "/") else None
        if name and precursors.is_signal(name):
            for step, value in curve:
                by_step[int(step)][name] = float(value)
    return dict(by_step)


def _band_settings(config: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """The monitor's band options and the step its bands start judging (``stuck_after``, else the warmup)."""
    options = {
        "width": float(config.get("stability.band_width") or 4.0),
        "horizon": int(config.get("stability.band_horizon") or 500),
    }
    after = config.get("stability.stuck_after")
    if after is None:
        after = config.get("model.warmup_steps") or 0
    return options, int(after)


def replay_gave_way(
    values: dict[int, dict[str, float]],
    events: Sequence[tuple[str, int]],
    band_options: dict[str, Any],
    after: int,
    linear: Optional[tuple[str, ...]] = None,
) -> list[GaveWay]:
    """Feed ``values`` in step order and attribute each ``(event, step)`` when the replay reaches its step
    (probes at that step included, as online); ``linear`` defaults to today's linear signals."""
    linear = precursors.LINEAR_SIGNALS if linear is None else linear
    recorder = GaveWayRecorder(precursors.is_signal, precursors.MAX_SPIKES, **band_options, linear=linear)
    recorder.bands.after = after
    steps, fed = sorted(values), 0
    for event, step in sorted(events, key=lambda item: item[1]):
        while fed < len(steps) and steps[fed] <= step:
            recorder.feed(steps[fed], values[steps[fed]])
            fed += 1
        recorder.attribute(event, step)
    return recorder.records


def _event(run_dir: Path, item: Any) -> tuple[str, int]:
    """One recorded gave-way item's ``(event, step)``; a handed summary.json with anything else is one line."""
    if not (
        isinstance(item, dict)
        and isinstance(item.get("event"), str)
        and isinstance(item.get("step"), int)
        and not isinstance(item["step"], bool)
    ):
        raise UsageError(
            f"{run_dir / SUMMARY_FILE}: gave_way_first holds {item!r}; each entry must be "
            "{event: <name>, step: <integer>, ...}, as andrea fit writes it"
        )
    return item["event"], item["step"]


def replay_run(run_dir: Path, linear: Optional[tuple[str, ...]] = None) -> tuple[list[dict], list[GaveWay]]:
    """A finished run's recorded gave-way records and the same events judged again (``linear``: as in
    :func:`replay_gave_way`). A run without records or events gives two empty lists."""
    record = read_record(run_dir)
    recorded = list(record.gave_way_first) if record is not None else []
    if not recorded:
        return [], []
    options, after = _band_settings(run_config(run_dir, record))
    events = [_event(run_dir, item) for item in recorded]
    return recorded, replay_gave_way(signal_values(read_scalars(run_dir)), events, options, after, linear)
