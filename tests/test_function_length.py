"""No function in the package, the benchmarks or the bundled plugins is longer than 60 lines (the house rule): a longer
one is cut into named steps. Measured on the AST (first line of the ``def`` to its last line, decorators
and docstring included); nested functions count on their own and inside their parent."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECKED = [ROOT / "andrea_lab", ROOT / "benchmarks", ROOT / "plugins" / "andrea-lab-cuda" / "src",
           ROOT / "plugins" / "andrea-lab-example" / "src"]
LIMIT = 60


def long_functions(files: list[Path], limit: int = LIMIT) -> list[str]:
    found = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - first + 1 > limit:
                    found.append(f"{path.name}:{node.lineno} {node.name} "
                                 f"({node.end_lineno - first + 1} lines)")
    return found


@pytest.mark.parametrize("folder", CHECKED, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_function_is_over_60_lines(folder):
    files = sorted(folder.rglob("*.py"))
    assert files
    assert long_functions(files) == []


def test_the_check_sees_a_long_function(tmp_path):
    body = "\n".join(f"        x{i} = {i}" for i in range(LIMIT))
    (tmp_path / "m.py").write_text(f"@staticmethod\ndef short():\n    pass\n\n\nclass C:\n    def long(self):\n{body}\n")
    assert [line.split(" ")[1] for line in long_functions([tmp_path / "m.py"])] == ["long"]
