"""andrea_lab/experiments/compare/gave_way_replay.py: the gave-way record judged again from a run's events, exact
under the rule it was recorded with, and today's rule on the Adam-eps share."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from torch.utils.tensorboard import SummaryWriter

from andrea_lab.experiments.compare.gave_way_replay import replay_run
from andrea_lab.fit.stability.bands import GaveWayRecorder
from andrea_lab.fit.stability.precursors import LINEAR_SIGNALS, MAX_SPIKES, is_signal, log_z
from andrea_lab.runs.directory import RunRecord, write_record

REPO = Path(__file__).resolve().parents[3]
OLD_RULE = (log_z.name,)
ENTROPY, EPS = "attn_entropy/block_00_min", "adam_eps_share/head"


def signals(step: int) -> dict[str, float]:
    """Attention entropy steady, then collapsing from step 150; Adam's eps share 0, then its first coordinate
    below eps at step 100 (a non-event that log|x| reads as twenty sds)."""
    return {ENTROPY: 2.0 if step < 150 else 0.01, EPS: 0.0 if step < 100 else 0.001}


def make_run(tmp_path: Path) -> Path:
    """A finished run whose divergence at step 180 the monitor recorded online under the old rule."""
    run = tmp_path / "baseline" / "lr1e-1-seed0"
    run.mkdir(parents=True)
    online = GaveWayRecorder(is_signal, MAX_SPIKES, width=4.0, horizon=500, linear=OLD_RULE)
    writer = SummaryWriter(str(run))
    for step in range(0, 200, 10):
        values = signals(step)
        online.feed(step, values)
        for name, value in values.items():
            writer.add_scalar(f"stability/{name}", value, step)
        writer.add_scalar("train/loss", 2.0, step)  # not a signal: ignored
    writer.close()
    online.attribute("divergence", 180)
    (run / "config.yaml").write_text(yaml.safe_dump({"stability": {"stuck_after": 0}}))
    write_record(run, RunRecord(status="diverged", gave_way_first=[r.as_dict() for r in online.records]))
    return run


def test_the_replay_reproduces_the_record_under_its_rule_and_names_the_attention_under_todays(tmp_path):
    run = make_run(tmp_path)
    recorded, old = replay_run(run, linear=OLD_RULE)
    assert [r.as_dict() for r in old] == recorded  # exact: the same events, bands and lead
    assert recorded[0]["signal"] == EPS and recorded[0]["left_band_at"] == 100
    assert EPS.split("/")[0] in LINEAR_SIGNALS
    _, today = replay_run(run)
    assert (today[0].signal, today[0].left_band_at, today[0].lead_steps) == (ENTROPY, 150, 30)


def test_the_script_prints_recorded_and_replayed_counts_and_writes_nothing(tmp_path):
    run = make_run(tmp_path)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in run.iterdir())
    printed = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "replay_gave_way.py"), str(tmp_path)], capture_output=True, text=True
    )
    assert printed.returncode == 0, printed.stderr
    assert "1 runs, 1 records; replayed under the recorded rule: 1/1 identical" in printed.stdout
    assert "| baseline | divergence | adam_eps_share | 1 | 0 |" in printed.stdout
    assert "| baseline | divergence | attn_entropy | 0 | 1 |" in printed.stdout
    assert sorted((p.name, p.stat().st_mtime_ns) for p in run.iterdir()) == before
    empty = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "replay_gave_way.py"), str(tmp_path / "nothing")],
        capture_output=True,
        text=True,
    )
    assert empty.returncode == 2 and "no finished runs" in empty.stderr
