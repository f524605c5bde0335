"""`andrea new-plugin KIND NAME`: the package it writes installs, passes its own tests (written with
andrea_lab.plugin.testing) and `andrea plugins --check`, for every kind."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import tomllib

from andrea_lab.commands import plugins
from andrea_lab.commands.new_plugin import compatible_range, main
from andrea_lab.errors import UsageError
from andrea_lab.plugin.testing import forget_modules

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("isolated_plugins")


@pytest.mark.slow  # pip builds and installs the package
@pytest.mark.parametrize("kind", ["activation", "norm_placement", "kernel_backend", "norm", "optimizer", "schedule"])
def test_the_package_installs_passes_its_tests_and_the_check(kind, tmp_path, pytester, monkeypatch, capsys):
    name = f"my_{kind}"
    root = tmp_path / "pkg"
    assert main([kind, name, "--dir", str(root)]) == 0
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    assert pyproject["build-system"]["build-backend"] == "setuptools.build_meta"
    assert pyproject["project"]["dependencies"] == [f"andrea-lab{compatible_range()}"]
    package = f"andrea_lab_my_{kind}"
    module = {
        "activation": "activations",
        "norm_placement": "placements",
        "kernel_backend": "backends",
        "norm": "norms",
        "optimizer": "optimizers",
        "schedule": "schedules",
    }[kind]
    cls = "My" + "".join(part.capitalize() for part in kind.split("_"))
    assert pyproject["project"]["entry-points"][f"andrea_lab.{kind}"] == {name: f"{package}.{module}:{cls}"}

    site = tmp_path / "site-packages"
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--no-input",
        "--disable-pip-version-check",
        "--target",
        str(site),
        str(root),
    ]
    if importlib.util.find_spec("setuptools") is not None:
        command.insert(4, "--no-build-isolation")  # build with the installed setuptools, offline
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    monkeypatch.syspath_prepend(str(site))
    from andrea_lab.model import registry

    registry.clear_cache()
    try:
        tests = pytester.runpytest_inprocess(
            "-p", "no:cacheprovider", "-c", str(root / "pyproject.toml"), "--rootdir", str(root), str(root / "tests")
        )
        outcomes = tests.parseoutcomes()
        assert tests.ret == pytest.ExitCode.OK and outcomes.get("failed", 0) == 0, tests.stdout.str()
        assert outcomes["passed"] >= 1
        capsys.readouterr()
        assert plugins.main(["--check", f"andrea-lab-my-{kind.replace('_', '-')}:{name}"]) == 0
        assert capsys.readouterr().out.startswith(f"PASS        andrea_lab.{kind} {name}")
    finally:
        forget_modules({package})
        registry.clear_cache()


@pytest.mark.parametrize(
    "argv, message",
    [
        (
            ["placement", "x"],
            "unknown plugin kind 'placement'; valid kinds: norm_placement, activation, kernel_backend",
        ),
        (["activation", "Squared-Tanh"], "plugin name 'Squared-Tanh' must be lower case .* e.g. 'squared_tanh'"),
        # These wrote `class None(...)`, `class True(...)`: a package with a SyntaxError.
        (["optimizer", "none"], r"plugin name 'none' \(class 'None'\) is the Python keyword 'None'; .* e.g. 'none_x'"),
        (["schedule", "true"], "is the Python keyword 'True'"),
        (["activation", "class"], r"plugin name 'class' \(class 'Class'\) is the Python keyword 'class'"),
    ],
)
def test_bad_kind_or_name(argv, message, tmp_path):
    with pytest.raises(UsageError, match=message):
        main([*argv, "--dir", str(tmp_path / "pkg")])
    assert not (tmp_path / "pkg").exists()


def test_refuses_to_write_into_a_non_empty_directory(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="already exists and is not empty"):
        main(["activation", "x", "--dir", str(tmp_path)])


@pytest.mark.parametrize(
    "version, expected",
    [("0.1.0", ">=0.1,<0.2"), ("0.4.2", ">=0.4,<0.5"), ("1.2.0", ">=1.2,<2"), ("2.0.1", ">=2.0,<3")],
)
def test_compatible_range(version, expected):
    assert compatible_range(version) == expected
