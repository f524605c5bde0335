"""`andrea tokenize` from the command line: the report, bad input, and a real SIGTERM then resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from andrea_lab.cli import main
from andrea_lab.data.corpus import CorpusError, resolve_corpus

REPO = Path(__file__).resolve().parents[2]


def _write_corpus(path: Path, copies: int) -> Path:
    import sysconfig

    files = sorted(Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))[:60]
    with open(path, "w", encoding="utf-8") as handle:
        for copy in range(copies):
            for file in files:
                handle.write(json.dumps({"text": f"# copy {copy}\n" + file.read_text(errors="replace")}) + "\n")
        handle.write('{"title": "no text"}\n')
    return path


def test_the_command_reports_tokens_shards_and_bad_records(tmp_path: Path, capsys) -> None:
    corpus = _write_corpus(tmp_path / "c.jsonl", 1)
    argv = [
        "tokenize",
        str(corpus),
        "--out",
        str(tmp_path / "out"),
        "--vocab-size",
        "300",
        "--workers",
        "0",
        "--shard-tokens",
        "50000",
        "--val-fraction",
        "0.1",
        "--no-progress",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "shards written" in out and "bad records skipped: 1 of 61" in out and "missing field: e.g. c.jsonl:60" in out
    assert main(argv) == 0
    assert "already complete" in capsys.readouterr().out


def test_bad_options_exit_2_naming_the_value(tmp_path: Path, capsys) -> None:
    corpus = _write_corpus(tmp_path / "c.jsonl", 1)
    assert main(["tokenize", str(corpus), "--out", str(tmp_path / "o"), "--val-fraction", "1.5"]) == 2
    assert "val_fraction must be strictly between 0 and 1, got 1.5" in capsys.readouterr().err


def test_the_120m_experiment_names_a_shard_directory_and_says_how_to_make_it() -> None:
    config = yaml.safe_load((REPO / "experiments/andrea-120m.yaml").read_text())
    spec = config["data"]["corpus"]
    assert spec != "stdlib"
    if not Path(spec).exists():
        with pytest.raises(CorpusError, match=r"andrea tokenize CORPUS --out DIR"):
            resolve_corpus(spec)


@pytest.mark.slow
def test_sigterm_stops_cleanly_and_the_same_command_resumes(tmp_path: Path) -> None:
    corpus = _write_corpus(tmp_path / "c.jsonl", 3)
    command = [
        sys.executable,
        "-m",
        "andrea_lab.cli",
        "tokenize",
        str(corpus),
        "--out",
        str(tmp_path / "out"),
        "--vocab-size",
        "300",
        "--sample-docs",
        "20",
        "--workers",
        "1",
        "--shard-tokens",
        "20000",
        "--no-progress",
    ]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    manifest = tmp_path / "out" / "manifest.json"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        if manifest.is_file() and len(json.loads(manifest.read_text())["shards"]) >= 2:
            break
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "interrupted" in err and "Run the same command again to resume" in err
    done_before = len(json.loads(manifest.read_text())["shards"])
    assert not json.loads(manifest.read_text())["complete"] and done_before >= 2
    resumed = subprocess.run(command, capture_output=True, text=True, timeout=300, env=os.environ)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{done_before} kept from before" in resumed.stdout
