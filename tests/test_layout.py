"""The package's top level is what README.md's Layout block says it is.

A newcomer reads the Layout block to find where things live; a module added at the top level of
``andrea_lab/`` without a line there (or a package renamed away from it) would make that map wrong.
The top level is kept short on purpose (issue 27 grouped 24 loose modules into packages): a new
module belongs in the package of its job, and this test makes adding one at the top a visible choice.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def layout_block() -> str:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Layout", 1)[1]
    return re.search(r"```\n(.*?)```", section, re.S).group(1)


def top_level_entries(package: Path) -> list[str]:
    """The modules (``name.py``) and packages (``name/``) directly inside ``package``."""
    modules = [p.name for p in package.glob("*.py") if p.name != "__init__.py"]
    packages = [p.name + "/" for p in package.iterdir() if (p / "__init__.py").is_file()]
    return sorted(modules + packages)


def named_in(block: str, entry: str) -> bool:
    return re.search(rf"(?<![\w/]){re.escape(entry)}", block) is not None


def test_every_top_level_module_and_package_is_in_the_readme_layout():
    entries = top_level_entries(REPO / "andrea_lab")
    missing = [entry for entry in entries if not named_in(layout_block(), entry)]
    assert not missing, (
        f"README.md's Layout block does not name {missing}: add a line, or move the module into a package"
    )


def test_the_check_sees_a_missing_entry(tmp_path):
    (tmp_path / "stray.py").write_text("")
    (tmp_path / "grouped").mkdir()
    (tmp_path / "grouped" / "__init__.py").write_text("")
    (tmp_path / "not_a_package").mkdir()
    assert top_level_entries(tmp_path) == ["grouped/", "stray.py"]
    assert named_in("grouped/ · other.py", "grouped/") and not named_in("grouped/ · other.py", "stray.py")
    assert not named_in("subgrouped/", "grouped/"), "a longer name containing the entry is not the entry"
