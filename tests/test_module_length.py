"""No module in the package, the benchmarks or the bundled plugins is longer than 450 lines (the house rule):
a longer one holds more than one job and is split by job. Counted as the file's lines, docstrings and
comments included, the way ``wc -l`` counts them."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = [ROOT / "andrea_lab", ROOT / "benchmarks", ROOT / "plugins" / "andrea-lab-cuda" / "src",
           ROOT / "plugins" / "andrea-lab-example" / "src"]
LIMIT = 450


def long_modules(files: list[Path], limit: int = LIMIT) -> list[str]:
    found = []
    for path in files:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(path.parents[1])} ({lines} lines)")
    return found


@pytest.mark.parametrize("folder", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_450_lines(folder):
    files = sorted(folder.rglob("*.py"))
    assert files
    assert long_modules(files) == []


def test_the_check_sees_a_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * LIMIT)
    (tmp_path / "long.py").write_text("x = 1\n" * (LIMIT + 1))
    assert long_modules([tmp_path / "short.py", tmp_path / "long.py"]) == [f"{tmp_path.name}/long.py (451 lines)"]
