"""`andrea plugins`: the listing, its JSON form, broken plugins and strict mode."""

import json
from importlib import metadata

import pytest

from andrea_lab.commands.plugins import main
from andrea_lab.model.registry import STRICT_ENV_VAR

GROUPS = [
    "andrea_lab.norm_placement",
    "andrea_lab.activation",
    "andrea_lab.kernel_backend",
    "andrea_lab.norm",
    "andrea_lab.optimizer",
    "andrea_lab.schedule",
]

# Whatever else is installed here, these tests see andrea-lab's built-ins and their own plugins only.
pytestmark = pytest.mark.usefixtures("isolated_plugins")


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv(STRICT_ENV_VAR, raising=False)


@pytest.fixture
def broken(make_distribution):
    make_distribution(
        "andrea-lab-broken",
        "0.3",
        entry_points={"activation": {"boom": "boom_plugin:Boom"}},
        files={"boom_plugin.py": "print('plugin chatter')\nraise ImportError('needs libfoo.so')\n"},
    )


@pytest.fixture
def clash(make_distribution):
    for dist in ("andrea-lab-alpha", "andrea-lab-beta"):
        make_distribution(dist, entry_points={"norm_placement": {"pre": "andrea_lab.model.builtin.placements:PreNorm"}})


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_lists_every_group_with_distribution_version_object_and_description(capsys):
    code, out, err = run(capsys)
    assert code == 0 and err == ""
    assert "plugin contract version 1" in out
    positions = [out.index(f"\n{group}\n") for group in GROUPS]
    assert positions == sorted(positions)
    version = metadata.version("andrea-lab")
    gelu = next(line for line in out.splitlines() if line.split()[:1] == ["gelu"])
    assert f"andrea-lab {version}" in gelu and "andrea_lab.model.builtin.activations:GELU" in gelu
    assert "GELU, tanh approximation" in gelu
    for name in ("pre", "post", "peri", "reordered", "deepnorm", "relu", "swiglu", "torch", "layernorm", "rmsnorm"):
        assert any(line.split()[:1] == [name] for line in out.splitlines()), name
    assert "Broken" not in out


def test_json(capsys):
    code, out, _ = run(capsys, "--json")
    assert code == 0
    data = json.loads(out)
    assert data["contract_version"] == 1 and data["strict"] is False
    assert list(data["groups"]) == GROUPS and data["broken"] == [] and data["clashes"] == []
    (torch_backend,) = [p for p in data["groups"]["andrea_lab.kernel_backend"] if p["name"] == "torch"]
    assert torch_backend == {
        "name": "torch",
        "qualified_name": "andrea-lab:torch",
        "distribution": "andrea-lab",
        "version": metadata.version("andrea-lab"),
        "target": "andrea_lab.model.builtin.backends:TorchBackend",
        "description": "eager PyTorch ops (runs everywhere; the reference for other backends)",
        "unavailable": None,
        "eager_fallback": [],
    }


def test_a_backend_that_cannot_run_here_is_listed_with_its_reason(capsys, make_distribution):
    make_distribution(
        "andrea-lab-fpga",
        files={
            "fpga.py": (
                "from andrea_lab.model.contracts import Availability, KernelBackend\n"
                "class Fpga(KernelBackend):\n"
                "    description = 'kernels on an FPGA'\n"
                "    @classmethod\n"
                "    def availability(cls):\n"
                "        return Availability(False, 'no FPGA found')\n"
            )
        },
        entry_points={"kernel_backend": {"fpga": "fpga:Fpga"}},
    )
    code, out, _ = run(capsys)
    (line,) = [line for line in out.splitlines() if line.split()[:1] == ["fpga"]]
    assert code == 0 and line.endswith("kernels on an FPGA [unavailable here: no FPGA found]")
    assert "Broken" not in out
    code, out, _ = run(capsys, "--json")
    (fpga,) = [p for p in json.loads(out)["groups"]["andrea_lab.kernel_backend"] if p["name"] == "fpga"]
    assert fpga["unavailable"] == "no FPGA found"


def test_a_backend_is_listed_with_the_ops_it_leaves_to_the_eager_reference(capsys, make_distribution):
    make_distribution(
        "andrea-lab-relu",
        files={
            "fastrelu.py": (
                "import torch\n"
                "from andrea_lab.model.contracts import KernelBackend\n"
                "class FastReLU(KernelBackend):\n"
                "    description = 'a faster relu'\n"
                "    def relu(self, x):\n"
                "        return torch.relu(x)\n"
            )
        },
        entry_points={"kernel_backend": {"fastrelu": "fastrelu:FastReLU"}},
    )
    code, out, _ = run(capsys)
    (line,) = [line for line in out.splitlines() if line.split()[:1] == ["fastrelu"]]
    assert line.endswith(
        "a faster relu [no native layer_norm, add_layer_norm, rms_norm, gelu_tanh, swiglu: eager fallback]"
    )
    (torch_line,) = [line for line in out.splitlines() if line.split()[:1] == ["torch"]]
    assert "eager fallback" not in torch_line, "the reference itself has nothing to fall back to"
    code, out, _ = run(capsys, "--json")
    (fast,) = [p for p in json.loads(out)["groups"]["andrea_lab.kernel_backend"] if p["name"] == "fastrelu"]
    assert fast["eager_fallback"] == ["layer_norm", "add_layer_norm", "rms_norm", "gelu_tanh", "swiglu"]


def test_check_passes_the_new_norms_and_placements(capsys):
    code, out, _ = run(capsys, "--check", "layernorm", "rmsnorm", "peri", "reordered", "deepnorm")
    assert code == 0 and "5 passed, 0 failed" in out
    assert "PASS        andrea_lab.norm rmsnorm" in out and "PASS        andrea_lab.norm_placement deepnorm" in out


def test_broken_plugins_are_listed_separately_with_their_error(capsys, broken):
    code, out, err = run(capsys)
    assert code == 0
    listing, broken_section = out.split("Broken plugins (1;")
    assert "boom" not in listing and "gelu" in listing
    assert "andrea_lab.activation boom  from andrea-lab-broken 0.3 (boom_plugin:Boom)" in broken_section
    assert "ImportError: needs libfoo.so" in broken_section
    assert "plugin chatter" in err and STRICT_ENV_VAR in err  # the plugin's print went to stderr


def test_broken_plugins_in_json_keep_stdout_parseable(capsys, broken):
    code, out, _ = run(capsys, "--json")
    assert code == 0
    data = json.loads(out)
    (entry,) = data["broken"]
    assert entry["group"] == "andrea_lab.activation" and entry["name"] == "boom"
    assert (entry["distribution"], entry["version"], entry["target"]) == (
        "andrea-lab-broken",
        "0.3",
        "boom_plugin:Boom",
    )
    assert "ImportError: needs libfoo.so" in entry["error"]
    assert "boom" not in [p["name"] for p in data["groups"]["andrea_lab.activation"]]


@pytest.mark.parametrize("argv", [[], ["--json"]])
def test_strict_mode_exits_non_zero_when_a_plugin_is_broken(capsys, monkeypatch, broken, argv):
    monkeypatch.setenv(STRICT_ENV_VAR, "1")
    code, out, err = run(capsys, *argv)
    assert code == 1
    assert f"1 broken plugin(s) and {STRICT_ENV_VAR} is set" in err
    assert "needs libfoo.so" in out  # the listing still says what is broken


def test_strict_mode_without_broken_plugins_exits_zero(capsys, monkeypatch):
    monkeypatch.setenv(STRICT_ENV_VAR, "1")
    code, out, _ = run(capsys, "--json")
    assert code == 0 and json.loads(out)["strict"] is True


def test_a_clash_is_shown_with_the_qualified_names(capsys, clash):
    code, out, _ = run(capsys)
    assert code == 0
    assert "andrea_lab.norm_placement pre: 'andrea-lab:pre' or 'andrea-lab-alpha:pre' or 'andrea-lab-beta:pre'" in out
    code, out, _ = run(capsys, "--json")
    assert json.loads(out)["clashes"] == [
        {
            "group": "andrea_lab.norm_placement",
            "name": "pre",
            "distributions": ["andrea-lab", "andrea-lab-alpha", "andrea-lab-beta"],
        }
    ]


def test_help_and_bad_arguments(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0 and "usage: andrea plugins" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["--yaml"])
    assert exited.value.code == 2 and "unrecognized arguments: --yaml" in capsys.readouterr().err


# --- andrea plugins --check ------------------------------------------------------------------------

CHECKED = '''
import torch
from torch import nn
from andrea_lab.model.builtin.placements import PreNorm
from andrea_lab.model.contracts import Activation, Availability, KernelBackend, LayerNorm, NormPlacement

class Softsign(Activation):
    """x / (1 + |x|)."""
    def forward(self, h):
        return h / (1 + h.abs())

class ForgotGated(Activation):
    def forward(self, h):
        gate, up = h.chunk(2, dim=-1)
        return torch.nn.functional.silu(gate) * up

class NaNs(Activation):
    def forward(self, h):
        return h / 0 * 0

class Unregistered(NormPlacement):
    """Keeps the sublayer in a list, so its parameters are not the placement's."""
    def __init__(self, d_model, sublayer, backend, eps=1e-5, bias=True):
        nn.Module.__init__(self)
        self.hidden = [sublayer]
        self.norm = LayerNorm(d_model, backend, eps=eps, bias=bias)
    def forward(self, x):
        return x + self.hidden[0](self.norm(x))

class Sloppy(KernelBackend):
    def gelu_tanh(self, x):
        return torch.nn.functional.gelu(x)  # the erf form, not the tanh approximation

class Fpga(KernelBackend):
    @classmethod
    def availability(cls):
        return Availability(False, "no FPGA found")
'''


@pytest.fixture
def checked(make_distribution):
    make_distribution(
        "andrea-lab-checked",
        "0.4",
        files={"checked.py": CHECKED},
        entry_points={
            "activation": {
                "softsign": "checked:Softsign",
                "forgot_gated": "checked:ForgotGated",
                "nans": "checked:NaNs",
            },
            "norm_placement": {"unregistered": "checked:Unregistered"},
            "kernel_backend": {"sloppy": "checked:Sloppy", "fpga": "checked:Fpga"},
        },
    )


def verdicts(out: str) -> dict[str, str]:
    """{plugin name: its verdict block} from the --check output."""
    blocks, name = {}, None
    for line in out.splitlines():
        if line and not line.startswith(" ") and "andrea_lab." in line:
            name = line.split()[2]
            blocks[name] = line
        elif name and line.startswith("    "):
            blocks[name] += "\n" + line
    return blocks


def test_check_passes_a_good_plugin_alone_and_with_every_builtin(capsys, checked):
    code, out, _ = run(capsys, "--check", "softsign")
    assert code == 0
    (block,) = verdicts(out).values()
    assert block.startswith("PASS        andrea_lab.activation softsign  (andrea-lab-checked 0.4)")
    assert (
        "micro model forward + backward, alone and with deepnorm, no_residual, peri, post, pre, reordered, "
        "torch, layernorm, rmsnorm, qk_norm True"
    ) in block
    assert "1 passed, 0 failed, 0 not available here" in out


@pytest.mark.parametrize(
    "name, reason",
    [
        (
            "forgot_gated",
            "expected (2, 5, 16) (ungated); it halves its input like a gated activation: declare `gated = True`",
        ),
        ("nans", "forward returned NaN or inf for a standard-normal input"),
        ("unregistered", "the sublayer is not a submodule of the placement"),
        ("sloppy", "gelu_tanh differs from the eager reference by up to"),
    ],
)
def test_check_fails_a_plugin_that_misbehaves_with_exit_status_1(capsys, checked, name, reason):
    code, out, _ = run(capsys, "--check", name)
    assert code == 1
    block = verdicts(out)[name]
    assert block.startswith("FAIL") and reason in block, block
    assert "1 failed" in out


def test_check_reports_an_unavailable_backend_with_its_reason_without_failing(capsys, checked):
    code, out, _ = run(capsys, "--check", "andrea-lab-checked:fpga", "andrea_lab:torch")
    assert code == 0
    blocks = verdicts(out)
    assert blocks["fpga"].startswith("UNAVAILABLE") and "not available here: no FPGA found" in blocks["fpga"]
    assert blocks["torch"].startswith("PASS") and "ops match the eager reference" in blocks["torch"]


def test_check_without_names_checks_every_plugin_and_fails_the_broken(capsys, broken):
    code, out, _ = run(capsys, "--check")
    assert code == 1
    blocks = verdicts(out)
    assert {"pre", "post", "gelu", "relu", "swiglu", "torch", "boom"} <= set(blocks)
    assert blocks["boom"].startswith("FAIL") and "needs libfoo.so" in blocks["boom"]
    assert all(blocks[name].startswith("PASS") for name in ("pre", "post", "gelu", "relu", "swiglu", "torch"))


def test_check_of_an_unknown_name_suggests_one(capsys):
    from andrea_lab.model.registry import PluginError

    with pytest.raises(PluginError, match="no installed plugin is named 'swigllu'; did you mean 'swiglu'"):
        main(["--check", "swigllu"])
