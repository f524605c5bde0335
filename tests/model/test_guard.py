"""A plugin that raises, returns the wrong shape or cannot run here is named in one message (exit 2):
its kind, name, distribution and what went wrong, never a raw traceback from deep in the model."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from andrea_lab import Andrea, preset
from andrea_lab.cli import DEBUG_ENV_VAR
from andrea_lab.cli import main as andrea
from andrea_lab.model.registry import BackendUnavailableError, PluginRuntimeError, list_plugins

pytestmark = pytest.mark.usefixtures("isolated_plugins", "faulty")

FAULTY = '''
import torch
from andrea_lab.model.builtin.placements import PreNorm
from andrea_lab.model.contracts import Activation, Availability, KernelBackend

class ForgotGated(Activation):
    """Halves its input like a gated activation, without declaring gated = True."""
    def forward(self, h):
        gate, up = h.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up

class GatedWhole(Activation):
    gated = True
    def forward(self, h):
        return h

class OneShort(Activation):
    def forward(self, h):
        return h[..., :-1]

class DropsTokens(PreNorm):
    def forward(self, x):
        return super().forward(x)[:, 1:]

class FailsInInit(Activation):
    def __init__(self, backend):
        raise OSError("libfoo.so: cannot open shared object file")

class FailsInForward(Activation):
    def forward(self, h):
        raise ValueError("bad input scale")

class PlacementFailsInInit(PreNorm):
    def __init__(self, d_model, sublayer, backend, eps=1e-5, bias=True):
        raise TypeError("expected a norm factory")

class Unavailable(KernelBackend):
    @classmethod
    def availability(cls):
        return Availability(False, "needs an FPGA (none found)")

class AvailabilityRaises(KernelBackend):
    @classmethod
    def availability(cls):
        raise KeyError("CUDA_HOME")

class OpRaises(KernelBackend):
    def gelu_tanh(self, x):
        raise RuntimeError("kernel launch failed")

class InitRaises(KernelBackend):
    def __init__(self):
        raise RuntimeError("no device context")
'''
ENTRY_POINTS = {
    "activation": {
        "forgot_gated": "faulty:ForgotGated",
        "gated_whole": "faulty:GatedWhole",
        "one_short": "faulty:OneShort",
        "fails_in_init": "faulty:FailsInInit",
        "fails_in_forward": "faulty:FailsInForward",
    },
    "norm_placement": {"drops_tokens": "faulty:DropsTokens", "placement_fails_in_init": "faulty:PlacementFailsInInit"},
    "kernel_backend": {
        "unavailable": "faulty:Unavailable",
        "availability_raises": "faulty:AvailabilityRaises",
        "op_raises": "faulty:OpRaises",
        "init_raises": "faulty:InitRaises",
    },
}
KIND = {name: kind for kind, names in ENTRY_POINTS.items() for name in names}


@pytest.fixture
def faulty(make_distribution):
    make_distribution("andrea-lab-faulty", "0.2", entry_points=ENTRY_POINTS, files={"faulty.py": FAULTY})


def build_and_run(name: str) -> None:
    model = Andrea(preset("andrea-micro", **{KIND[name]: name}))
    idx = torch.zeros(2, 8, dtype=torch.long)
    model(idx, idx)


@pytest.mark.parametrize(
    "name, where, cause",
    [
        ("fails_in_init", "its constructor", "OSError: libfoo.so: cannot open shared object file"),
        ("fails_in_forward", "forward", "ValueError: bad input scale"),
        ("placement_fails_in_init", "its constructor", "TypeError: expected a norm factory"),
        ("op_raises", "forward", "RuntimeError: kernel launch failed"),
        ("init_raises", "its constructor", "RuntimeError: no device context"),
    ],
)
def test_an_exception_inside_a_plugin_names_the_plugin(name, where, cause):
    with pytest.raises(PluginRuntimeError) as caught:
        build_and_run(name)
    assert str(caught.value) == (
        f"{KIND[name]} plugin '{name}' from andrea-lab-faulty 0.2 "
        f"({ENTRY_POINTS[KIND[name]][name]}) raised in {where}: {cause}"
    )
    assert caught.value.__cause__ is not None and type(caught.value.__cause__).__name__ == cause.split(":")[0]


def test_availability_that_raises_names_the_backend():
    with pytest.raises(
        PluginRuntimeError,
        match=r"kernel_backend plugin 'availability_raises' from andrea-lab-faulty "
        r"0.2 .*: availability\(\) raised KeyError: 'CUDA_HOME'",
    ):
        build_and_run("availability_raises")
    (info,) = [i for i in list_plugins("kernel_backend") if i.name == "availability_raises"]
    assert "KeyError" in info.error  # listed as broken, not as healthy


def test_an_unavailable_backend_is_one_line_with_its_reason():
    with pytest.raises(BackendUnavailableError) as caught:
        build_and_run("unavailable")
    assert str(caught.value) == "kernel backend 'unavailable' is not available here: needs an FPGA (none found)"
    (info,) = [i for i in list_plugins("kernel_backend") if i.name == "unavailable"]
    assert (info.error, info.unavailable) == (None, "needs an FPGA (none found)")


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "forgot_gated",
            "returned shape (2, 8, 128) for an input of shape (2, 8, 256); expected width 256 "
            "(the MLP hidden size, ungated: input width 256); it halves its input like a gated "
            "activation: declare `gated = True` on the class",
        ),
        (
            "gated_whole",
            "returned shape (2, 8, 512) for an input of shape (2, 8, 512); expected width 256 "
            "(the MLP hidden size, gated: input width 512); it declares `gated = True`, so it receives "
            "[gate | value] and must return half of it",
        ),
        ("one_short", "returned shape (2, 8, 255) for an input of shape (2, 8, 256); expected width 256"),
    ],
)
def test_an_activation_of_the_wrong_width_says_what_width_was_expected(name, expected):
    with pytest.raises(PluginRuntimeError) as caught:
        build_and_run(name)
    assert f"activation plugin '{name}' from andrea-lab-faulty 0.2" in str(caught.value)
    assert expected in str(caught.value)


def test_a_placement_that_drops_tokens_is_named():
    with pytest.raises(
        PluginRuntimeError,
        match=r"norm_placement plugin 'drops_tokens' from andrea-lab-faulty 0.2 .*"
        r"returned shape \(2, 7, 64\) for a residual stream of shape "
        r"\(2, 8, 64\)",
    ):
        build_and_run("drops_tokens")


def test_an_error_of_the_model_itself_is_not_blamed_on_a_plugin():
    model = Andrea(preset("andrea-micro"))
    with pytest.raises(ValueError, match="exceeds the model's context") as caught:
        model(torch.zeros(1, 65, dtype=torch.long))
    assert not isinstance(caught.value, PluginRuntimeError)


def _params_config(tmp_path: Path, **plugins: str) -> str:
    path = tmp_path / "model.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": {
                    "config": {"vocab_size": 257, "d_model": 32, "n_layer": 1, "n_head": 2, "block_size": 16, **plugins}
                }
            }
        )
    )
    return str(path)


def test_the_cli_prints_one_line_and_exits_2_unless_debugging(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv(DEBUG_ENV_VAR, raising=False)
    config = _params_config(tmp_path, activation="fails_in_init")
    assert andrea(["params", "--config", config]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "andrea params: error: activation plugin 'fails_in_init' from andrea-lab-faulty 0.2 (faulty:FailsInInit) "
        "raised in its constructor: OSError: libfoo.so: cannot open shared object file",
        f"(set {DEBUG_ENV_VAR}=1 for the full traceback)",
    ]
    monkeypatch.setenv(DEBUG_ENV_VAR, "1")
    with pytest.raises(PluginRuntimeError):
        andrea(["params", "--config", config])


def _fit(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess:
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a plugin that fails is named in one line; " * 300)
    args = [
        "fit",
        "--data.corpus",
        str(corpus),
        "--data.tokenizer",
        "byte",
        "--data.batch_size",
        "2",
        "--model.config.vocab_size",
        "257",
        "--model.config.block_size",
        "16",
        "--model.config.d_model",
        "32",
        "--model.config.n_layer",
        "1",
        "--model.config.n_head",
        "2",
        "--trainer.max_steps",
        "1",
        "--trainer.limit_val_batches",
        "1",
        "--trainer.enable_progress_bar",
        "false",
        "--trainer.logger.init_args.save_dir",
        str(tmp_path / "runs"),
        *extra,
    ]
    env = {k: v for k, v in os.environ.items() if k != DEBUG_ENV_VAR}
    env.update(PYTHONPATH=os.pathsep.join(sys.path), ANDREA_LAB_CACHE=str(tmp_path / "cache"))
    return subprocess.run(
        [sys.executable, "-m", "andrea_lab.cli", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow
def test_fit_with_an_unavailable_backend_is_one_line_exit_2(tmp_path):
    result = _fit(tmp_path, "--model.config.kernel_backend", "andrea-lab-faulty:unavailable")
    assert result.returncode == 2, result.stderr[-3000:]
    assert (
        "andrea fit: error: kernel backend 'andrea-lab-faulty:unavailable' is not available here: "
        "needs an FPGA (none found)"
    ) in result.stderr.splitlines()
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_fit_with_a_gated_activation_that_forgot_gated_is_one_line_exit_2(tmp_path):
    result = _fit(tmp_path, "--model.config.activation", "forgot_gated")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "andrea fit: error: activation plugin 'forgot_gated' from andrea-lab-faulty 0.2" in result.stderr
    assert "declare `gated = True`" in result.stderr and "Traceback" not in result.stderr


def test_a_broken_plugin_is_named_when_the_model_is_built_before_any_forward():
    with pytest.raises(PluginRuntimeError, match="activation plugin 'forgot_gated'"):
        Andrea(preset("andrea-micro", activation="forgot_gated"))  # no forward call of ours


def test_the_check_leaves_the_random_generators_and_the_weights_as_they_were(monkeypatch):
    from andrea_lab.model import transformer

    def build() -> tuple[torch.Tensor, dict]:
        torch.manual_seed(3)
        model = Andrea(preset("andrea-micro", dropout=0.2))  # dropout draws from the generator in the check
        return torch.get_rng_state(), model.state_dict()

    checked_rng, checked_weights = build()
    monkeypatch.setattr(transformer, "verify_plugins", lambda *args, **kwargs: None)
    unchecked_rng, unchecked_weights = build()
    assert torch.equal(checked_rng, unchecked_rng)
    assert all(torch.equal(checked_weights[key], unchecked_weights[key]) for key in unchecked_weights)


def test_the_forward_passes_hold_only_the_architecture():
    """No try/except, no shape check, no branch on a plugin in forward: Andrea.forward raises only for a sequence
    longer than the context (the model's own rule), the blocks and MLP not at all."""
    import ast
    import inspect
    import textwrap

    from andrea_lab.model import transformer

    def forward_of(cls) -> ast.FunctionDef:
        return ast.parse(textwrap.dedent(inspect.getsource(cls.forward))).body[0]

    for cls in (transformer.Andrea, transformer.Block, transformer.MLP, transformer.CausalSelfAttention):
        nodes = list(ast.walk(forward_of(cls)))
        assert not any(isinstance(node, ast.Try) for node in nodes), cls.__name__
        raised = [ast.unparse(node.exc.func) for node in nodes if isinstance(node, ast.Raise)]
        assert raised == (["ValueError"] if cls is transformer.Andrea else []), cls.__name__
    assert len(inspect.getsource(transformer.Block.forward).splitlines()) <= 4
