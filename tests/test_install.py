"""The two set-up commands of the README: the CPU install selects PyTorch's CPU build on an ordinary machine
(not only on one whose pip is configured to find a local ``+cpu`` wheel), and CI runs exactly the README's
test command."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
CPU_INDEX = "https://download.pytorch.org/whl/cpu"


def _requirement_lines() -> tuple[list[str], list[Requirement]]:
    """The file's pip options and its requirements, comments and blank lines left out."""
    lines = [line.split("#", 1)[0].strip() for line in (REPO / "requirements-cpu.txt").read_text().splitlines()]
    options = [line for line in lines if line.startswith("-")]
    return options, [Requirement(line) for line in lines if line and not line.startswith("-")]


def _torch_for(platform: str) -> list[Requirement]:
    environment = {**default_environment(), "sys_platform": platform}
    _, requirements = _requirement_lines()
    return [r for r in requirements if r.name == "torch" and (r.marker is None or r.marker.evaluate(environment))]


def test_the_cpu_requirements_name_pytorchs_cpu_index():
    options, _ = _requirement_lines()
    assert f"--extra-index-url {CPU_INDEX}" in options, "without PyTorch's CPU index pip resolves the CUDA build"


def test_linux_and_windows_get_exactly_the_cpu_build():
    for platform in ("linux", "win32"):
        (torch,) = _torch_for(platform)
        (pin,) = torch.specifier
        assert pin.operator == "==" and Version(pin.version).local == "cpu", f"{platform}: {torch}"


def test_macos_gets_the_plain_build_which_has_no_cpu_label():
    (torch,) = _torch_for("darwin")
    (pin,) = torch.specifier
    assert pin.operator == "==" and Version(pin.version).local is None


def test_every_platform_pins_the_same_release():
    releases = {Version(next(iter(_torch_for(p)[0].specifier)).version).public for p in ("linux", "win32", "darwin")}
    assert len(releases) == 1, releases


def _readme_commands() -> list[str]:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    return [line for block in re.findall(r"```bash\n(.*?)```", readme, re.S) for line in block.splitlines()]


def test_ci_runs_exactly_the_readmes_test_command():
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    (test_command,) = [line for line in _readme_commands() if " && python -m pytest" in line]
    assert ci[-1] == test_command
    # Its tests run on every core (pytest-xdist): the suite is mostly single-threaded Python and subprocesses.
    assert test_command.endswith("python -m pytest -n auto") and "pytest-xdist" in (REPO / "pyproject.toml").read_text()


def test_both_setup_commands_activate_the_venv_before_the_first_andrea_or_python():
    """After the two commands the printed ``next:`` lines and the README's ``andrea ...`` lines must run as
    shown: the environment is activated in the user's shell, not reached through ``.venv/bin/``."""
    setup = [line for line in _readme_commands() if line.startswith("python3 -m venv .venv")]
    assert len(setup) == 2
    for line in setup:
        steps = [step.strip() for step in line.split("&&")]
        assert steps[1] == ". .venv/bin/activate", line
        assert not any(".venv/bin/" in step for step in steps[2:]), line
        assert steps[2].startswith("pip install --retries 1 -r requirements-cpu.txt"), line
