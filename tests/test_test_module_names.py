"""No two test modules outside packages share a file name.

pytest imports a test file in a folder without ``__init__.py`` as a top-level module named after the file, so
two such files of one name (``tests/data/test_heldout.py`` and ``tests/fit/test_heldout.py``) stop the whole
run at collection with "import file mismatch". Running one folder's tests, as one does while working, never
shows it: only the full run does, so this check runs in every run.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_ROOTS = ("tests", "plugins/andrea-lab-example/tests", "plugins/andrea-lab-cuda/tests")


def top_level_test_modules(root: Path) -> dict[str, list[Path]]:
    """Test files imported under their bare name (their folder is not a package), grouped by that name."""
    by_name: dict[str, list[Path]] = defaultdict(list)
    for path in sorted(root.rglob("test_*.py")):
        if ".venv" in path.parts or (path.parent / "__init__.py").is_file():
            continue
        by_name[path.name].append(path)
    return by_name


def clashes(roots: list[Path]) -> dict[str, list[Path]]:
    merged: dict[str, list[Path]] = defaultdict(list)
    for root in roots:
        for name, paths in top_level_test_modules(root).items():
            merged[name].extend(paths)
    return {name: paths for name, paths in merged.items() if len(paths) > 1}


def test_no_two_test_modules_outside_packages_share_a_name():
    found = clashes([REPO / root for root in TEST_ROOTS if (REPO / root).is_dir()])
    assert not found, {name: [str(p.relative_to(REPO)) for p in paths] for name, paths in found.items()}


def test_the_check_sees_a_clash(tmp_path):
    for folder in ("data", "fit"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_heldout.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "pkg" / "test_heldout.py").write_text("", encoding="utf-8")
    assert list(clashes([tmp_path])) == ["test_heldout.py"]
    assert len(clashes([tmp_path])["test_heldout.py"]) == 2
