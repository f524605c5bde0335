"""No function in the package, the benchmarks or the bundled plugins is longer than 60 lines, and no module
longer than 450 (the house rules): a longer function is cut into named steps, a longer module holds more than
one job and is split by job. Functions are measured on the AST (first line of the ``def`` to its last line,
decorators and docstring included; nested functions count on their own and inside their parent); modules as
the file's lines, docstrings and comments included, the way ``wc -l`` counts them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = [
    ROOT / "andrea_lab",
    ROOT / "benchmarks",
    ROOT / "plugins" / "andrea-lab-cuda" / "src",
    ROOT / "plugins" / "andrea-lab-example" / "src",
]
LIMIT = 60
MODULE_LIMIT = 450


def long_functions(files: list[Path], limit: int = LIMIT) -> list[str]:
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - first + 1 > limit:
                    found.append(f"{path.name}:{node.lineno} {node.name} ({node.end_lineno - first + 1} lines)")
    return found


def python_files(folder: Path) -> list[Path]:
    """The checked folder's modules; none would mean the check checked nothing (a moved folder)."""
    files = sorted(folder.rglob("*.py"))
    assert files, f"no Python files under {folder}"
    return files


@pytest.mark.parametrize("folder", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_is_over_60_lines(folder):
    assert long_functions(python_files(folder)) == []


def test_the_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "m.py").write_text(
        f"@staticmethod\ndef short():\n    pass\n\n\nclass C:\n    def long(self):\n{body}\n"
    )
    assert [line.split(" ")[1] for line in long_functions([tmp_path / "m.py"])] == ["long"]


def long_modules(files: list[Path], limit: int = MODULE_LIMIT) -> list[str]:
    found = []
    for path in files:
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > limit:
            found.append(f"{path.relative_to(path.parents[1])} ({lines} lines)")
    return found


@pytest.mark.parametrize("folder", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_450_lines(folder):
    assert long_modules(python_files(folder)) == []


def test_the_check_sees_a_long_module(tmp_path):
    (tmp_path / "short.py").write_text("x = 1\n" * MODULE_LIMIT)
    (tmp_path / "long.py").write_text("x = 1\n" * (MODULE_LIMIT + 1))
    assert long_modules([tmp_path / "short.py", tmp_path / "long.py"]) == [f"{tmp_path.name}/long.py (451 lines)"]
