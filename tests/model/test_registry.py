"""The registry with what andrea-lab itself installs: the built-ins, found through its own metadata.

Failure cases that need other distributions installed (broken, clashing, off-contract plugins)
are in test_third_party_plugins.py.
"""

from importlib import metadata
from pathlib import Path

import pytest
import tomllib
from hypothesis import given, settings
from hypothesis import strategies as st

from andrea_lab import AndreaConfig
from andrea_lab.fit.optimizers.adamw import AdamW, AdamWIndependentDecay
from andrea_lab.fit.optimizers.lion import Lion
from andrea_lab.fit.optimizers.muon import Muon
from andrea_lab.fit.optimizers.schedule_free import ScheduleFreeAdamW
from andrea_lab.fit.schedules import Constant, Linear, WarmupCosine, WarmupStableDecay
from andrea_lab.model.builtin.activations import GELU, ReLU, SwiGLU
from andrea_lab.model.builtin.backends import TorchBackend
from andrea_lab.model.builtin.norms import LayerNorm, RMSNorm
from andrea_lab.model.builtin.placements import DeepNorm, PeriNorm, PostNorm, PreNorm, ReorderedNorm
from andrea_lab.model.components import resolve_components
from andrea_lab.model.contracts import CONTRACT_VERSION
from andrea_lab.model.registry import (
    GROUP_CONTRACTS,
    KINDS,
    STRICT_ENV_VAR,
    PluginError,
    PluginInfo,
    clear_cache,
    group_name,
    list_plugins,
    registered_names,
    resolve,
    strict_mode,
)

BUILTINS = {
    "norm_placement": {
        "pre": PreNorm,
        "post": PostNorm,
        "peri": PeriNorm,
        "reordered": ReorderedNorm,
        "deepnorm": DeepNorm,
    },
    "activation": {"gelu": GELU, "relu": ReLU, "swiglu": SwiGLU},
    "kernel_backend": {"torch": TorchBackend},
    "norm": {"layernorm": LayerNorm, "rmsnorm": RMSNorm},
    "optimizer": {
        "adamw": AdamW,
        "adamw_independent_wd": AdamWIndependentDecay,
        "muon": Muon,
        "lion": Lion,
        "schedule_free": ScheduleFreeAdamW,
    },
    "schedule": {"warmup_cosine": WarmupCosine, "wsd": WarmupStableDecay, "constant": Constant, "linear": Linear},
}
ALL_BUILTIN_NAMES = [name for names in BUILTINS.values() for name in names]


def test_kinds_are_the_contract_groups():
    assert set(KINDS) == set(BUILTINS) == set(GROUP_CONTRACTS)
    assert [group_name(kind) for kind in KINDS] == [f"andrea_lab.{kind}" for kind in KINDS]


@pytest.mark.parametrize("kind, name", [(kind, name) for kind in BUILTINS for name in BUILTINS[kind]])
def test_builtins_resolve_by_name(kind, name):
    cls = resolve(kind, name)
    assert cls is BUILTINS[kind][name]
    assert cls.contract_version == CONTRACT_VERSION


def test_builtins_come_from_andrea_labs_own_entry_points():
    version = metadata.version("andrea-lab")
    infos = {(info.kind, info.name): info for info in list_plugins()}
    for kind, names in BUILTINS.items():
        for name, cls in names.items():
            info = infos[(kind, name)]
            assert (info.distribution, info.version, info.error) == ("andrea-lab", version, None)
            assert info.target == f"{cls.__module__}:{cls.__qualname__}"
            assert info.description and "\n" not in info.description
            assert info.group == f"andrea_lab.{kind}" and info.qualified_name == f"andrea-lab:{name}"


def test_registered_names_are_sorted_and_include_the_builtins():
    for kind, names in BUILTINS.items():
        installed = registered_names(kind)
        assert installed == sorted(set(installed))
        assert set(names) <= set(installed)


def test_list_plugins_of_one_kind():
    assert {info.kind for info in list_plugins("activation")} == {"activation"}
    assert {"gelu", "relu", "swiglu"} <= {info.name for info in list_plugins("activation")}


def test_unknown_name_lists_the_installed_ones():
    with pytest.raises(PluginError) as caught:
        resolve("activation", "gleu")
    message = str(caught.value)
    assert "unknown activation 'gleu'" in message and "andrea_lab.activation" in message
    for name in registered_names("activation"):
        assert name in message
    assert "post" not in message  # only this group's names
    assert "module:Class" in message  # and says how to use an unpackaged class


@settings(max_examples=25, deadline=None)  # each lookup scans the installed metadata
@given(st.from_regex(r"[a-z][a-z0-9_]{0,20}", fullmatch=True).filter(lambda n: n not in ALL_BUILTIN_NAMES))
def test_any_unregistered_name_is_refused_with_the_installed_names(name):
    installed = registered_names("norm_placement")
    if name in installed:  # a plugin installed in this environment; not the case under test
        return
    with pytest.raises(PluginError, match="installed in andrea_lab.norm_placement: " + ", ".join(installed)):
        resolve("norm_placement", name)


@pytest.mark.parametrize("name", ["", "   ", None, 3])
def test_empty_or_non_string_name_is_refused(name):
    with pytest.raises(PluginError, match="non-empty name; installed in andrea_lab.kernel_backend: .*torch"):
        resolve("kernel_backend", name)


@pytest.mark.parametrize(
    "call",
    [
        lambda: group_name("nonlinearity"),
        lambda: resolve("nonlinearity", "gelu"),
        lambda: list_plugins("nonlinearity"),
        lambda: registered_names("nonlinearity"),
    ],
)
def test_unknown_kind_lists_the_valid_kinds(call):
    with pytest.raises(
        PluginError, match="unknown plugin kind 'nonlinearity'; valid kinds: norm_placement, activation, kernel_backend"
    ):
        call()


@pytest.mark.parametrize("spec", ["andrea-lab:gelu", "andrea_lab:gelu", "Andrea.Lab:gelu"])
def test_distribution_qualified_name(spec):
    assert resolve("activation", spec) is GELU


def test_distribution_qualified_unknown_name_lists_what_it_registers():
    with pytest.raises(
        PluginError,
        match=r"distribution 'andrea-lab' registers no activation named 'geLU'.*"
        r"andrea-lab:gelu, andrea-lab:relu",
    ):
        resolve("activation", "andrea-lab:geLU")


@pytest.mark.usefixtures("import_paths")
def test_import_path_selects_an_unregistered_class():
    assert resolve("activation", "andrea_lab.model.builtin.activations:ReLU") is ReLU
    assert resolve("norm_placement", "andrea_lab.model.builtin.placements:PostNorm") is PostNorm


@pytest.mark.parametrize(
    "spec, reason",
    [
        ("no_such_module_xyz:Thing", "No module named 'no_such_module_xyz'"),
        ("andrea_lab.model.builtin.activations:Nope", "has no attribute 'Nope'"),
    ],
)
@pytest.mark.usefixtures("import_paths")
def test_import_path_that_does_not_import(spec, reason):
    with pytest.raises(PluginError, match=f"activation plugin '{spec}': cannot import it .*{reason}.*module:Attribute"):
        resolve("activation", spec)


@pytest.mark.usefixtures("import_paths")
def test_a_class_of_another_group_is_refused_with_what_is_missing():
    with pytest.raises(PluginError, match="does not satisfy the norm_placement contract: missing final_norm"):
        resolve("norm_placement", "andrea_lab.model.builtin.activations:GELU")


@pytest.mark.usefixtures("import_paths")
def test_a_function_is_not_a_plugin():
    with pytest.raises(PluginError, match="is not a class .*implementing andrea_lab.model.contracts.Activation"):
        resolve("activation", "torch.nn.functional:relu")


def test_resolve_is_cached_until_cleared():
    assert resolve("activation", "gelu") is resolve("activation", "gelu")
    assert resolve.cache_info().hits >= 1
    clear_cache()
    assert resolve.cache_info().currsize == 0


@pytest.mark.parametrize(
    "value, strict",
    [("1", True), ("true", True), (" YES ", True), ("on", True), ("0", False), ("", False), ("no", False)],
)
def test_strict_mode_from_the_environment(monkeypatch, value, strict):
    monkeypatch.setenv(STRICT_ENV_VAR, value)
    assert strict_mode() is strict


def test_strict_mode_is_off_without_the_variable(monkeypatch):
    monkeypatch.delenv(STRICT_ENV_VAR, raising=False)
    assert strict_mode() is False


def test_plugin_info_names():
    info = PluginInfo("activation", "gelu", "m:GELU", "andrea-lab", "0.1.0")
    assert (info.group, info.qualified_name, info.error) == ("andrea_lab.activation", "andrea-lab:gelu", None)


def test_config_reports_an_unknown_name_with_the_installed_ones():
    with pytest.raises(
        PluginError,
        match="unknown norm_placement 'prre'; did you mean 'pre'\\? installed in "
        "andrea_lab.norm_placement: .*post, pre",
    ):
        resolve_components(AndreaConfig(norm_placement="prre"))


@pytest.mark.parametrize(
    "spec, suggestion", [("geluu", "'gelu'"), ("andrea-lab:swigl", "'andrea-lab:swiglu'"), ("Relu", "'relu'")]
)
def test_a_misspelt_name_gets_a_suggestion(spec, suggestion):
    with pytest.raises(PluginError, match=f"did you mean {suggestion}"):
        resolve("activation", spec)


def test_no_suggestion_for_a_name_like_nothing_installed():
    with pytest.raises(PluginError) as caught:
        resolve("activation", "qqqqqqqq")
    assert "did you mean" not in str(caught.value)


def test_the_installed_entry_points_are_the_ones_pyproject_declares():
    # After the plugin code moves (it did, into andrea_lab/model/), an install made before still names
    # the old targets: every built-in would then be "broken". Say so here, with the fix.
    pyproject = tomllib.loads((Path(__file__).resolve().parents[2] / "pyproject.toml").read_text())
    declared = {**pyproject["project"]["entry-points"], "console_scripts": pyproject["project"]["scripts"]}
    installed: dict[str, dict[str, str]] = {}
    for ep in metadata.distribution("andrea-lab").entry_points:
        installed.setdefault(ep.group, {})[ep.name] = ep.value
    assert installed == declared, "andrea-lab's installed metadata is stale: run `pip install -e .` again"
