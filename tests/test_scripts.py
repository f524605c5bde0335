"""scripts/*.py on handed folders and files: a missing or damaged input is one line naming it, exit status 2,
never a traceback (errors.run_script, as `andrea` ends its commands)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def damaged_run(root: Path) -> Path:
    """A run directory whose summary.json is JSON, but its gave-way records are not what andrea fit writes."""
    run = root / "v" / "lr1e-3-seed0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "finished", "gave_way_first": [{"event": "spike"}]}))
    (run / "config.yaml").write_text("x: [\n")
    return root


@pytest.mark.parametrize(
    "script, args, message",
    [
        (
            "stream_at_init",
            ["{tmp}/nowhere.yaml"],
            "stream_at_init: error: suite file '{tmp}/nowhere.yaml' does not exist",
        ),
        ("stream_at_init", ["{tmp}/runs/v/lr1e-3-seed0/config.yaml"], "is not valid YAML"),
        (
            "replay_gave_way",
            ["{tmp}/runs"],
            "replay_gave_way: error: {tmp}/runs/v/lr1e-3-seed0/summary.json: gave_way_first holds {{'event': 'spike'}}",
        ),
        ("replay_gave_way", ["{tmp}/nowhere"], "no finished runs under {tmp}/nowhere"),
        (
            "replicate_spread",
            ["{tmp}/runs", "{tmp}/nowhere"],
            "replicate_spread: error: {tmp}/nowhere is not a directory",
        ),
        ("replicate_spread", ["{tmp}/runs", "{tmp}/runs"], "no run in {tmp}/runs matches one in {tmp}/runs"),
    ],
)
def test_a_script_on_a_bad_folder_says_so_in_one_line(script, args, message, tmp_path):
    damaged_run(tmp_path / "runs")
    command = [sys.executable, str(REPO / "scripts" / f"{script}.py"), *(a.format(tmp=tmp_path) for a in args)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert message.format(tmp=tmp_path) in result.stderr and len(result.stderr.strip().splitlines()) == 1
