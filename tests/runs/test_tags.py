"""Each TensorBoard tag is spelled in one place in the package: andrea_lab/runs/tags.py for the fit's scalars,
the metric's decorator in andrea_lab/fit/stability/probe.py for the stability probe's. A second spelling (a reader's
regex, a prefix list, a chart) would drift from the first; everything else imports the one definition."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import andrea_lab
from andrea_lab.fit.stability import (
    precursors,  # noqa: F401  (registers the precursor metrics in probe.METRICS)
    probe,
)
from andrea_lab.runs import tags

PACKAGE = Path(andrea_lab.__file__).parent


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings (prose may name a tag)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def string_literals() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string literal in the package, f-string pieces included, docstrings not."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                found.append((str(path.relative_to(PACKAGE.parent)), node.lineno, node.value))
    return found


def spellings(tag: str, literals: list[tuple[str, int, str]]) -> list[str]:
    """Where ``tag`` is written out: a literal holding it as a whole path (not ``train/grad_norm_x``)."""
    pattern = re.compile(rf"(?<![\w/]){re.escape(tag)}(?![\w])")
    return [f"{file}:{line}" for file, line, text in literals if pattern.search(text)]


LITERALS = string_literals()


@pytest.mark.parametrize("tag", tags.ALL)
def test_a_fit_tag_is_spelled_once_in_tags_py(tag):
    assert spellings(tag, LITERALS) == [f"andrea_lab/runs/tags.py:{_line_of(tag)}"]


def _line_of(tag: str) -> int:
    return next(line for file, line, text in LITERALS if file == "andrea_lab/runs/tags.py" and text == tag)


@pytest.mark.parametrize("metric", list(probe.METRICS.values()), ids=lambda m: m.tag)
def test_a_probe_tag_is_spelled_once_by_its_metric(metric):
    assert spellings(metric.tag, LITERALS) == [], "the probe's tags are composed from PREFIX and the name"
    named = [f"{file}:{line}" for file, line, text in LITERALS if text == metric.name]
    registries = ("andrea_lab/fit/stability/probe.py", "andrea_lab/fit/stability/precursors.py")
    assert len(named) == 1 and named[0].startswith(registries), named
    assert metric.compute.__name__ == metric.name, "the function is named after its tag"


def test_the_check_finds_a_second_spelling():
    """The checker itself: a reader's regex or a prefix written out counts as a spelling."""
    fake = LITERALS + [("x.py", 1, r"^stability/grad_norm/.*"), ("y.py", 2, "val/loss/")]
    assert spellings("stability/grad_norm", fake) == ["x.py:1"]
    assert spellings(tags.VAL_LOSS, fake)[-1] == "y.py:2"
    assert spellings(tags.TRAIN_GRAD_NORM, [("z.py", 3, "train/grad_norm_max")]) == []
