"""The code stays formatted and lint-clean: ``ruff format --check`` and ``ruff check`` over the repository,
with the settings in pyproject.toml (line length 120; pycodestyle, pyflakes, import order, bugbear).

ruff is a dev dependency (``pip install -e '.[dev]'``, what CI installs); a missing ruff fails this test
rather than skipping it, so a CI that lost it cannot pass for the wrong reason.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def ruff(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=cwd, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize(
    "command", [("check", "--no-cache", "."), ("format", "--check", "--no-cache", ".")], ids=["check", "format"]
)
def test_ruff_finds_nothing(command):
    result = ruff(*command)
    assert result.returncode == 0, f"ruff {' '.join(command)}:\n{result.stdout}{result.stderr}"


def test_ruff_reads_this_projects_settings_and_would_fail(tmp_path):
    (tmp_path / "pyproject.toml").write_text((REPO / "pyproject.toml").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "bad.py").write_text("import os\nx = 'a' + " + "'b' + " * 25 + "'c'\n", encoding="utf-8")
    check = ruff("check", "--no-cache", ".", cwd=tmp_path)
    fmt = ruff("format", "--check", "--no-cache", ".", cwd=tmp_path)
    assert check.returncode == 1 and "F401" in check.stdout and "E501" in check.stdout, check.stdout
    assert fmt.returncode == 1 and "bad.py" in fmt.stdout + fmt.stderr
