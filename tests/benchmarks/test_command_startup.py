"""benchmarks/command_startup.py: one row per command with its time, the ratio to the interpreter alone and the
heavy libraries its --help loaded; bad input in one line. Times are printed, never asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "command_startup.py"


def test_one_row_per_command_names_what_its_help_loaded():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--repeats", "1", "compare", "heldout"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    cells = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line.startswith("| ")]
    rows = {row[0].strip(): row[1:] for row in cells}
    assert set(rows) == {"command", "compare", "heldout"}
    assert float(rows["compare"][0]) > 0 and float(rows["compare"][1]) > 0
    assert rows["compare"][2].strip() == "none"  # its parser lives apart from the comparison (compare_args)


def test_bad_input_is_one_line():
    done = subprocess.run([sys.executable, str(SCRIPT), "--repeats", "0"], capture_output=True, text=True)
    assert done.returncode == 2 and "--repeats must be at least 1, got 0" in done.stderr
    assert "Traceback" not in done.stderr
