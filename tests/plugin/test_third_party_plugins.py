"""Third-party plugins installed for real: fake distributions for the failure cases, and the example
package in plugins/andrea-lab-example installed with pip into a temporary directory.

Nothing here depends on what else is installed in the environment: each test installs what it
needs on a temporary path, other plugin distributions are hidden (``isolated_plugins``), and the
registry's cache is cleared around each test.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch

from andrea_lab import Andrea, preset
from andrea_lab.model.builtin.activations import GELU
from andrea_lab.model.components import resolved_mlp_ratio
from andrea_lab.model.contracts import LayerNorm
from andrea_lab.model.registry import STRICT_ENV_VAR, PluginError, clear_cache, list_plugins, resolve
from andrea_lab.plugin.testing import forget_modules, write_distribution

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "plugins" / "andrea-lab-example"
QUICKSTART = REPO / "experiments" / "quickstart.yaml"

pytest_plugins = ["pytester"]
# Whatever else is installed here, these tests see andrea-lab's built-ins and their own plugins only.
pytestmark = pytest.mark.usefixtures("isolated_plugins")

CUBE = """
from andrea_lab.model.contracts import Activation

class Cube(Activation):
    description = "{who}'s cube"

    def forward(self, h):
        return h ** 3
"""


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV_VAR, raising=False)


def _error_of(kind: str, name: str) -> str | None:
    (info,) = [info for info in list_plugins(kind) if info.name == name]
    return info.error


# --- a plugin whose import raises ------------------------------------------------------------------


@pytest.fixture
def broken_plugin(make_distribution):
    make_distribution(
        "andrea-lab-broken",
        "0.3",
        entry_points={"activation": {"boom": "boom_plugin:Boom"}},
        files={"boom_plugin.py": "raise RuntimeError('kaboom: CUDA toolkit not found')\n"},
    )


def test_broken_plugin_is_listed_with_its_error_and_others_still_load(broken_plugin):
    error = _error_of("activation", "boom")
    assert "andrea-lab-broken 0.3" in error and "RuntimeError: kaboom: CUDA toolkit not found" in error
    others = [info for info in list_plugins() if info.name != "boom"]
    assert others and all(info.error is None for info in others if info.distribution == "andrea-lab")


def test_broken_plugin_warns_when_its_group_is_used_and_models_still_build(broken_plugin):
    with pytest.warns(RuntimeWarning, match=r"ignoring broken activation plugins: andrea-lab-broken:boom"):
        assert resolve("activation", "andrea-lab:gelu") is GELU
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the other groups are not concerned
        resolve("norm_placement", "pre")
        Andrea(preset("andrea-micro"))  # the default gelu is cached now: warned once, not at every build


def test_selecting_the_broken_plugin_fails_with_the_original_exception(broken_plugin):
    with warnings.catch_warnings(), pytest.raises(PluginError) as caught:
        warnings.simplefilter("error")  # one error, not also a warning that it is being ignored
        resolve("activation", "boom")
    assert "activation plugin 'boom' (boom_plugin:Boom) from andrea-lab-broken 0.3 failed to load" in str(caught.value)
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert str(caught.value.__cause__) == "kaboom: CUDA toolkit not found"


def test_selecting_the_broken_plugin_in_a_config(broken_plugin):
    with pytest.raises(PluginError, match="andrea-lab-broken.*kaboom"):
        Andrea(preset("andrea-micro", activation="boom"))


def test_strict_mode_makes_any_broken_plugin_an_error(broken_plugin, monkeypatch):
    monkeypatch.setenv(STRICT_ENV_VAR, "1")
    with pytest.raises(
        PluginError, match=f"broken activation plugins \\({STRICT_ENV_VAR} is set\\): andrea-lab-broken:boom: .*kaboom"
    ):
        resolve("activation", "gelu")
    assert resolve("norm_placement", "pre")  # a group without broken plugins is unaffected


@pytest.mark.parametrize(
    "files, target, expected",
    [
        (
            {"needs_dep.py": "import a_dependency_that_is_not_installed\n"},
            "needs_dep:Act",
            "ModuleNotFoundError: No module named 'a_dependency_that_is_not_installed'",
        ),
        ({"typo_plugin.py": "class Act: pass\n"}, "typo_plugin:Actt", "AttributeError"),
        ({"syntax_plugin.py": "def broken(:\n"}, "syntax_plugin:Act", "SyntaxError"),
        ({}, "not_a_module_at_all:Act", "ModuleNotFoundError"),
    ],
)
def test_every_kind_of_import_failure_is_reported(make_distribution, files, target, expected):
    make_distribution("andrea-lab-fragile", "2.0", entry_points={"kernel_backend": {"fragile": target}}, files=files)
    assert expected in _error_of("kernel_backend", "fragile")
    with pytest.warns(RuntimeWarning, match="fragile"):
        assert resolve("kernel_backend", "andrea-lab:torch")  # the built-in still works


# --- two distributions registering the same name ---------------------------------------------------


@pytest.fixture
def clashing_plugins(make_distribution):
    for who in ("alpha", "beta"):
        make_distribution(
            f"andrea-lab-{who}",
            "1.0" if who == "alpha" else "2.5",
            entry_points={"activation": {"cube": f"{who}_cube:Cube"}},
            files={f"{who}_cube.py": CUBE.format(who=who)},
        )


def test_a_clash_names_both_distributions(clashing_plugins):
    with pytest.raises(PluginError) as caught:
        resolve("activation", "cube")
    message = str(caught.value)
    assert "activation 'cube' is registered by more than one distribution" in message
    assert "andrea-lab-alpha 1.0 (alpha_cube:Cube)" in message and "andrea-lab-beta 2.5 (beta_cube:Cube)" in message
    assert "select one explicitly, e.g. 'andrea-lab-alpha:cube'" in message


def test_a_clash_is_settled_by_naming_the_distribution(clashing_plugins):
    alpha, beta = resolve("activation", "andrea-lab-alpha:cube"), resolve("activation", "andrea_lab_beta:cube")
    assert (alpha.__module__, beta.__module__) == ("alpha_cube", "beta_cube")
    assert [(i.distribution, i.description) for i in list_plugins("activation") if i.name == "cube"] == [
        ("andrea-lab-alpha", "alpha's cube"),
        ("andrea-lab-beta", "beta's cube"),
    ]
    model = Andrea(preset("andrea-micro", activation="andrea-lab-beta:cube"))
    assert model.blocks[0].mlp.sublayer.activation.__class__ is beta


def test_a_clash_in_a_config_fails_when_the_model_is_built(clashing_plugins):
    with pytest.raises(PluginError, match="andrea-lab-alpha.*andrea-lab-beta"):
        Andrea(preset("andrea-micro", activation="cube"))


# --- plugins that do not satisfy the contract ------------------------------------------------------

OFF_CONTRACT = {
    "no_gated": (
        "activation",
        """
        class Act:
            contract_version = 1
            default_mlp_ratio = 4.0
            def forward(self, h): return h
        """,
        "does not satisfy the activation contract: missing gated",
    ),
    "two_args": (
        "activation",
        """
        from andrea_lab.model.contracts import Activation
        class Act(Activation):
            def __init__(self, backend, width):
                super().__init__(backend)
            def forward(self, h): return h
        """,
        r"wrong constructor signature for an activation plugin: .*width.*; expected \(backend\)",
    ),
    "no_eps": (
        "norm_placement",
        """
        from andrea_lab.model.contracts import NormPlacement
        class Act(NormPlacement):
            def __init__(self, d_model, sublayer, backend):
                super().__init__(d_model, sublayer, backend)
            def forward(self, x): return x + self.sublayer(x)
        """,
        r"wrong constructor signature .*expected \(d_model, sublayer, backend, eps=..., bias=...\)",
    ),
    "no_availability": (
        "kernel_backend",
        """
        class Act:
            contract_version = 1
            def layer_norm(self, x, w, b, eps): ...
            def add_layer_norm(self, x, d, w, b, eps): ...
            def gelu_tanh(self, x): ...
            def relu(self, x): ...
            def swiglu(self, g, u): ...
        """,
        "does not satisfy the kernel_backend contract: missing availability",
    ),
    "availability_none": (
        "kernel_backend",
        """
        from andrea_lab.model.contracts import KernelBackend
        class Act(KernelBackend):
            availability = None
        """,
        r"has no callable availability\(\) check",
    ),
    "availability_instance_method": (
        "kernel_backend",
        """
        from andrea_lab.model.contracts import Availability, KernelBackend
        class Act(KernelBackend):
            def availability(self):
                return Availability(True)
        """,
        r"availability\(\) must be a @classmethod .*got function",
    ),
    "a_function": (
        "activation",
        """
        def Act(backend): return None
        """,
        "is not a class",
    ),
}


@pytest.mark.parametrize("plugin", list(OFF_CONTRACT))
def test_off_contract_plugin_is_rejected_at_selection_naming_what_is_missing(make_distribution, plugin):
    kind, source, reason = OFF_CONTRACT[plugin]
    make_distribution(
        "andrea-lab-sloppy",
        "0.0.1",
        entry_points={kind: {plugin: f"sloppy_{plugin}:Act"}},
        files={f"sloppy_{plugin}.py": textwrap.dedent(source)},
    )
    with pytest.raises(PluginError, match=reason) as caught:
        resolve(kind, plugin)
    assert f"{kind} plugin '{plugin}' (sloppy_{plugin}:Act) from andrea-lab-sloppy 0.0.1" in str(caught.value)
    assert _error_of(kind, plugin) == str(caught.value)  # andrea plugins shows the same reason


# --- contract versions ----------------------------------------------------------------------------


@pytest.mark.parametrize("version", [2, 0])
def test_plugin_for_another_contract_version_is_refused_naming_both(make_distribution, version):
    make_distribution(
        "andrea-lab-future",
        "3.0",
        entry_points={"activation": {"future": "future_act:Act"}},
        files={
            "future_act.py": f"from andrea_lab.model.contracts import Activation\n"
            f"class Act(Activation):\n    contract_version = {version}\n"
        },
    )
    with pytest.raises(PluginError) as caught:
        resolve("activation", "future")
    assert (
        f"'future' (future_act:Act) from andrea-lab-future 3.0 was written for plugin contract version {version}, "
        f"but this andrea-lab provides contract version 1"
    ) in str(caught.value)


# --- import paths: variants that are not packaged (yet) ---------------------------------------------

MY_ACTIVATION = """
import torch
from andrea_lab.model.contracts import Activation

class MyActivation(Activation):
    description = "softplus, not packaged yet"

    def forward(self, h):
        return torch.nn.functional.softplus(h)

class Variants:
    Nested = MyActivation
"""


@pytest.mark.usefixtures("import_paths")
def test_import_path_selects_an_unpackaged_class(tmp_path, monkeypatch):
    (tmp_path / "scratch").mkdir()
    (tmp_path / "scratch" / "my_module.py").write_text(MY_ACTIVATION)
    monkeypatch.syspath_prepend(str(tmp_path / "scratch"))
    try:
        cls = resolve("activation", "my_module:MyActivation")
        assert cls.__name__ == "MyActivation" and resolve("activation", "my_module:Variants.Nested") is cls
        config = preset("andrea-micro", activation="my_module:MyActivation")
        model = Andrea(config)
        _, loss = model(torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long))
        loss.backward()
        assert type(model.blocks[0].mlp.sublayer.activation) is cls
    finally:
        forget_modules({"my_module"})


@pytest.mark.usefixtures("import_paths")
def test_import_path_into_a_module_that_shares_a_distributions_name(make_distribution):
    # The usual layout: distribution my-plugin, import package my_plugin; an unregistered class in
    # it is still selectable by its import path.
    make_distribution(
        "my-plugin",
        "1.0",
        entry_points={"activation": {"soft": "my_plugin:MyActivation"}},
        files={"my_plugin.py": MY_ACTIVATION + "\nclass Unregistered(MyActivation):\n    pass\n"},
    )
    assert resolve("activation", "my_plugin:Unregistered").__name__ == "Unregistered"
    assert resolve("activation", "my-plugin:soft").__name__ == "MyActivation"
    with pytest.raises(PluginError, match="distribution 'my-plugin' registers no activation named 'Missing'"):
        resolve("activation", "my-plugin:Missing")
    with pytest.raises(PluginError, match="distribution 'my_plugin' registers no activation named 'Missing'"):
        resolve("activation", "my_plugin:Missing")  # not an attribute of my_plugin either


@pytest.mark.usefixtures("import_paths")
def test_import_path_into_a_module_whose_dependency_is_missing(make_distribution):
    # The module exists (and is named like a distribution): its own error is shown, not "registers no".
    make_distribution("needs-dep", files={"needs_dep.py": "import not_installed_xyz\n"})
    with pytest.raises(
        PluginError, match="'needs_dep:Act' failed to import: ModuleNotFoundError: No module named 'not_installed_xyz'"
    ):
        resolve("activation", "needs_dep:Act")


@pytest.mark.usefixtures("import_paths")
def test_import_path_whose_module_raises_is_a_plugin_error(make_distribution):
    make_distribution("andrea-lab-nothing", files={"explodes.py": "raise RuntimeError('kaboom')\n"})
    with pytest.raises(PluginError, match="'explodes:Act'.*RuntimeError: kaboom") as caught:
        resolve("activation", "explodes:Act")
    assert isinstance(caught.value.__cause__, RuntimeError)


# --- the example package, installed with pip ------------------------------------------------------


@pytest.fixture(scope="session")
def example_install(tmp_path_factory) -> Path:
    """plugins/andrea-lab-example installed by pip into a fresh directory (built from a copy of the
    sources, so that the build leaves nothing in the working tree)."""
    work = tmp_path_factory.mktemp("andrea-lab-example")
    source, target = work / "src", work / "site-packages"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".*"))
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
        str(target),
        str(source),
    ]
    if importlib.util.find_spec("setuptools") is not None:
        command.insert(4, "--no-build-isolation")  # build with the installed setuptools, offline
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    assert (target / "andrea_lab_example-0.1.0.dist-info" / "entry_points.txt").is_file()
    return target


@pytest.fixture
def example_on_path(example_install, monkeypatch):
    forget_modules({"andrea_lab_example"})
    monkeypatch.syspath_prepend(str(example_install))
    clear_cache()
    yield example_install
    forget_modules({"andrea_lab_example"})
    clear_cache()


def test_example_package_is_discovered_with_its_distribution(example_on_path):
    infos = {(i.kind, i.name): i for i in list_plugins() if i.distribution == "andrea-lab-example"}
    assert set(infos) == {("activation", "squared_relu"), ("norm_placement", "sandwich"), ("norm", "dyt")}
    for info in infos.values():
        assert (info.version, info.error) == ("0.1.0", None) and info.description
    squared_relu = resolve("activation", "squared_relu")
    assert Path(sys.modules[squared_relu.__module__].__file__).is_relative_to(example_on_path)


def test_example_package_builds_a_model_that_trains(example_on_path):
    torch.manual_seed(0)
    config = preset("andrea-micro", activation="squared_relu", norm_placement="sandwich")
    model = Andrea(config)
    assert sum(isinstance(m, LayerNorm) for m in model.modules()) == 4 * config.n_layer + 1
    assert resolved_mlp_ratio(config) == 4.0
    h = torch.randn(3, 7)
    torch.testing.assert_close(model.blocks[0].mlp.sublayer.activation(h), torch.relu(h) ** 2)
    idx = torch.randint(0, config.vocab_size, (2, 16))
    _, loss = model(idx, idx)
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for p in model.parameters()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert model.blocks[0].attn.norm_out.weight.grad.abs().sum() > 0  # the second norm is in the graph


def _env_with(path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != STRICT_ENV_VAR}
    env["PYTHONPATH"] = os.pathsep.join([str(path)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return {**env, **extra}


def test_example_packages_own_tests_pass_against_the_install(example_on_path, pytester):
    # In-process (torch is imported already), with the example's own pytest settings.
    result = pytester.runpytest_inprocess(
        "-p",
        "no:cacheprovider",
        "-c",
        str(EXAMPLE / "pyproject.toml"),
        "--rootdir",
        str(EXAMPLE),
        str(EXAMPLE / "tests"),
    )
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert result.parseoutcomes()["passed"] >= 8


def _broken_site(root: Path) -> Path:
    site = root / "broken-site-packages"
    write_distribution(
        site,
        "andrea-lab-broken",
        "0.3",
        entry_points={"activation": {"boom": "boom_plugin:Boom"}},
        files={"boom_plugin.py": "raise RuntimeError('kaboom')\n"},
    )
    return site


@pytest.mark.slow
def test_andrea_plugins_cli_lists_the_example_and_the_broken(example_install, tmp_path):
    env = _env_with(example_install)
    env["PYTHONPATH"] = os.pathsep.join([str(_broken_site(tmp_path)), env["PYTHONPATH"]])
    command = [sys.executable, "-m", "andrea_lab.cli", "plugins"]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    listing, broken = result.stdout.split("Broken plugins")
    assert "squared_relu" in listing and "sandwich" in listing and "andrea-lab-example 0.1.0" in listing
    assert "andrea-lab-broken 0.3" in broken and "RuntimeError: kaboom" in broken
    strict = subprocess.run(
        [*command, "--json"], env={**env, STRICT_ENV_VAR: "1"}, capture_output=True, text=True, timeout=300
    )
    assert strict.returncode == 1
    assert "andrea-lab-broken" in [entry["distribution"] for entry in json.loads(strict.stdout)["broken"]]


def _quick_fit_args(tmp_path: Path) -> list[str]:
    """`andrea fit` on the quickstart experiment, shrunk to seconds: a small text corpus, byte tokens,
    a one-layer model, 3 steps, and everything written under tmp_path."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a plugin is found through its entry point; " * 600)
    return [
        "fit",
        "--config",
        str(QUICKSTART),
        "--data.corpus",
        str(corpus),
        "--data.tokenizer",
        "byte",
        "--model.config.vocab_size",
        "257",
        "--data.batch_size",
        "4",
        "--data.cache_dir",
        str(tmp_path / "cache"),
        "--model.config.block_size",
        "32",
        "--model.config.d_model",
        "32",
        "--model.config.n_layer",
        "1",
        "--model.config.n_head",
        "2",
        "--trainer.max_steps",
        "3",
        "--trainer.val_check_interval",
        "3",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.num_sanity_val_steps",
        "0",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
    ]


@pytest.mark.slow
def test_andrea_fit_with_the_example_plugins(example_install, tmp_path):
    command = [
        sys.executable,
        "-m",
        "andrea_lab.cli",
        *_quick_fit_args(tmp_path),
        "--model.config.activation",
        "squared_relu",
        "--model.config.norm_placement",
        "sandwich",
    ]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        env=_env_with(example_install, ANDREA_LAB_CACHE=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (run_dir,) = (tmp_path / "runs").glob("*/version_0")
    saved = (run_dir / "config.yaml").read_text()
    assert "activation: squared_relu" in saved and "norm_placement: sandwich" in saved
    checkpoint = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=False)
    assert checkpoint["global_step"] == 3
    state = checkpoint["state_dict"]
    assert any(".norm_out." in key for key in state)  # the sandwich's second norm was trained and saved


@pytest.mark.slow
def test_andrea_fit_selecting_a_broken_plugin_fails_with_one_message(tmp_path):
    site = _broken_site(tmp_path)
    command = [sys.executable, "-m", "andrea_lab.cli", *_quick_fit_args(tmp_path), "--model.config.activation", "boom"]
    result = subprocess.run(
        command,
        cwd=tmp_path,
        env=_env_with(site, ANDREA_LAB_CACHE=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode != 0
    assert "from andrea-lab-broken 0.3 failed to load: RuntimeError: kaboom" in result.stderr
    assert "Traceback" not in result.stderr


# --- descriptions: the plugin's own, the same rule for every kind ----------------------------------

DESCRIBED = '''
from andrea_lab.model.contracts import Activation, KernelBackend

class Documented(KernelBackend):
    """Kernels written in Triton.

    More detail that the listing does not show.
    """

class Silent(KernelBackend):
    pass

class Explicit(KernelBackend):
    """Not this line."""
    description = "this line"

class DocumentedActivation(Activation):
    """Softsign, x / (1 + |x|)."""
    def forward(self, h):
        return h / (1 + h.abs())

class SilentActivation(DocumentedActivation):
    pass
'''


def test_description_is_the_classs_own_for_every_kind(make_distribution):
    make_distribution(
        "andrea-lab-described",
        files={"described.py": DESCRIBED},
        entry_points={
            "kernel_backend": {
                "documented": "described:Documented",
                "silent": "described:Silent",
                "explicit": "described:Explicit",
            },
            "activation": {
                "documented_act": "described:DocumentedActivation",
                "silent_act": "described:SilentActivation",
            },
        },
    )
    descriptions = {
        info.name: info.description for info in list_plugins() if info.distribution == "andrea-lab-described"
    }
    assert descriptions == {
        "documented": "Kernels written in Triton.",
        "silent": "",
        "explicit": "this line",
        "documented_act": "Softsign, x / (1 + |x|).",
        "silent_act": "",
    }
