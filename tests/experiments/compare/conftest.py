"""Fixtures shared by the compare tests."""

from pathlib import Path

import pytest

from andrea_lab.commands.compare import committed_suites

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="session")
def committed_project():
    """The committed suites of docs/results with their claims, read once per test session: reading them parses
    each cited variant's command (seconds), and three tests judge the same committed tables."""
    return committed_suites(REPO / "docs" / "results", REPO / "experiments" / "suites")
