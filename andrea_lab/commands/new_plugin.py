"""`andrea new-plugin KIND NAME`: write a ready plugin package to start from.

The package has a pyproject with a build system, the entry point and a compatible andrea-lab range;
a working class (a placeholder behaviour to replace); tests that use andrea_lab.plugin.testing; a README.
It installs and passes its tests as written:

    andrea new-plugin activation squared_tanh
    pip install -e './andrea-lab-squared-tanh[test]'
    pytest andrea-lab-squared-tanh && andrea plugins --check squared_tanh
"""

from __future__ import annotations

import argparse
import keyword
import re
import textwrap
from pathlib import Path

from andrea_lab import __version__
from andrea_lab.errors import UsageError
from andrea_lab.files import check_output_dir
from andrea_lab.model.contracts import CONTRACT_VERSION, PLUGIN_KINDS
from andrea_lab.model.registry import KINDS

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]*")
MODULES = {
    "activation": "activations",
    "norm_placement": "placements",
    "kernel_backend": "backends",
    "norm": "norms",
    "optimizer": "optimizers",
    "schedule": "schedules",
}

CLASSES = {
    "activation": '''
        """{name}: an MLP activation (replace this line: it is shown by `andrea plugins`)."""

        from typing import ClassVar

        import torch

        from andrea_lab.plugin import Activation


        class {cls}(Activation):
            """{name}: describe the function here; the first line is the description if `description` is unset.

            The MLP calls ``forward`` on ``(batch, tokens, hidden)``, or on ``(batch, tokens, 2·hidden)``
            when ``gated = True`` (gate first, value second), and expects ``(batch, tokens, hidden)`` back.
            """

            # The plugin contract this class was written for: a different andrea-lab contract refuses it
            # at selection rather than running it under rules it was not written for.
            contract_version: ClassVar[int] = {contract}
            description: ClassVar[str] = "{name} (replace: one line shown by `andrea plugins`)"
            gated: ClassVar[bool] = False
            default_mlp_ratio: ClassVar[float] = 4.0  # 8/3 is the usual choice for a gated activation

            def forward(self, h: torch.Tensor) -> torch.Tensor:
                # Compute through self.backend where it has the op (gelu_tanh, relu, swiglu): a faster
                # backend then accelerates this activation too. Replace with your function.
                return self.backend.gelu_tanh(h)
        ''',
    "norm_placement": '''
        """{name}: a norm placement (replace this line: it is shown by `andrea plugins`)."""

        from typing import ClassVar

        import torch
        from torch import nn

        from andrea_lab.plugin import KernelBackend, NormFactory, NormPlacement


        class {cls}(NormPlacement):
            """{name}: describe the wiring here, e.g. ``x + f(LN(x))``.

            The model builds one instance per sublayer (attention, then MLP) and calls it on the residual
            stream ``(batch, tokens, d_model)``; it must return the new stream, of the same shape.
            """

            contract_version: ClassVar[int] = {contract}
            description: ClassVar[str] = "{name} (replace: one line shown by `andrea plugins`)"
            final_norm: ClassVar[bool] = True  # whether the stack ends in a norm before the head

            def __init__(self, d_model: int, sublayer: nn.Module, backend: KernelBackend, eps: float = 1e-5,
                         bias: bool = True, norm: NormFactory | None = None):
                super().__init__(d_model, sublayer, backend, eps, bias, norm)  # registers self.sublayer
                # make_norm builds a norm of the kind model.config.norm selects (layernorm by default).
                self.norm = self.make_norm(d_model)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return x + self.sublayer(self.norm(x))  # replace with your wiring
        ''',
    "kernel_backend": '''
        """{name}: a kernel backend (replace this line: it is shown by `andrea plugins`)."""

        from typing import ClassVar

        import torch

        from andrea_lab.plugin import Availability, KernelBackend


        class {cls}(KernelBackend):
            """{name}: describe what it accelerates here.

            KernelBackend is the eager PyTorch reference: override the ops you accelerate, inherit the rest.
            The model makes one instance and shares it by every layer; weight and bias may be None (a
            LayerNorm without bias). Every op must be differentiable (wrap a custom kernel in a
            torch.autograd.Function).
            """

            contract_version: ClassVar[int] = {contract}
            description: ClassVar[str] = "{name} (replace: one line shown by `andrea plugins`)"

            @classmethod
            def availability(cls) -> Availability:
                # Asked before any instance exists; say exactly why not, e.g.
                # Availability(False, "no CUDA device: ...; select kernel_backend 'torch'").
                return Availability(True)

            def relu(self, x: torch.Tensor) -> torch.Tensor:
                return torch.relu(x)  # replace with your kernel
        ''',
    "norm": '''
        """{name}: a norm (replace this line: it is shown by `andrea plugins`)."""

        from typing import ClassVar

        import torch
        from torch import nn

        from andrea_lab.plugin import KernelBackend, Norm


        class {cls}(Norm):
            """{name}: describe the normalisation here.

            The model builds every norm with it (the placements', the final one, the QK norm):
            ``{cls}(dim, backend, eps=..., bias=...)``, called on ``(..., dim)`` and returning that shape.
            """

            contract_version: ClassVar[int] = {contract}
            description: ClassVar[str] = "{name} (replace: one line shown by `andrea plugins`)"

            def __init__(self, dim: int, backend: KernelBackend, eps: float = 1e-5, bias: bool = True):
                super().__init__()
                self.backend, self.eps = backend, eps
                self.weight = nn.Parameter(torch.ones(dim))

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                # Compute through self.backend where it has the op (layer_norm, rms_norm): a faster backend
                # then accelerates this norm too. Replace with your function.
                return self.backend.rms_norm(x, self.weight, self.eps)
        ''',
    "optimizer": '''
        """{name}: an optimizer (replace this line: it is shown by `andrea plugins`)."""

        from typing import Any, ClassVar, Mapping

        import torch

        from andrea_lab.plugin import Optimizer, Option


        class {cls}(Optimizer):
            """{name}: describe the update rule here.

            AndreaLM constructs it as ``{cls}(lr=..., betas=..., eps=..., weight_decay=..., **optimizer_args)``
            and calls ``build`` with torch param groups per update rule: ``groups`` below says which parameter
            roles (matrix, embedding, vector) each rule of yours takes; decay is already set per group.
            """

            contract_version: ClassVar[int] = {contract}
            description: ClassVar[str] = "{name} (replace: one line shown by `andrea plugins`)"
            groups: ClassVar[Mapping[str, tuple[str, ...]]] = {{"sgd": ("matrix", "embedding", "vector")}}
            # Every keyword of yours below, with its type and valid range: a value outside it is refused before a
            # run starts, and the contract check trains at each closed end of each range.
            options: ClassVar[Mapping[str, Option]] = {{"momentum": Option(float, 0.0, 1.0, high_open=True)}}

            def __init__(self, lr: float, betas: tuple[float, float], eps: float, weight_decay: float,
                         momentum: float = 0.9):
                super().__init__(lr, betas, eps, weight_decay)
                self.momentum = momentum  # an option of yours: model.optimizer_args: {{momentum: 0.9}}

            def build(self, groups: Mapping[str, list[dict[str, Any]]], fused: bool = True) -> torch.optim.Optimizer:
                # Replace with your optimizer; it must leave parameters without a gradient untouched.
                return torch.optim.SGD(groups["sgd"], lr=self.lr, momentum=self.momentum)
        ''',
    "schedule": '''
        """{name}: a learning-rate schedule (replace this line: it is shown by `andrea plugins`)."""

        from typing import ClassVar

        from andrea_lab.plugin import Schedule


        class {cls}(Schedule):
            """{name}: describe the schedule here.

            AndreaLM constructs it as ``{cls}(warmup_steps=..., decay_steps=..., min_lr_ratio=...)`` and
            multiplies the peak learning rate by ``multiplier(step)`` at every optimizer step.
            """

            contract_version: ClassVar[int] = {contract}
            description: ClassVar[str] = "{name} (replace: one line shown by `andrea plugins`)"
            constant: ClassVar[bool] = False  # True only if constant after warmup (schedule-free needs that)

            def multiplier(self, step: int) -> float:
                warm = self.warmup(step)  # the linear warmup, None after it
                if warm is not None:
                    return warm
                return max(self.min_lr_ratio, 1.0 - (step - self.warmup_steps) / self.decay_steps)  # replace
        ''',
}

TESTS = {
    "activation": """
        import torch

        from andrea_lab.plugin import KernelBackend, check_activation
        from {package}.{module} import {cls}


        def test_keeps_the_activation_contract():
            check_activation({cls})                   # alone, and in micro models with every built-in
            check_activation("{dist}:{name}")  # selected by its registered name, as a YAML does


        def test_computes_through_the_backend(recording_backend):
            {cls}(recording_backend)(torch.randn(2, 3, 8))
            assert recording_backend.calls == ["gelu_tanh"]  # update when you change forward


        def test_values():
            h = torch.randn(4, 8, dtype=torch.float64)
            expected = torch.nn.functional.gelu(h, approximate="tanh")  # your function's reference values
            torch.testing.assert_close({cls}(KernelBackend())(h), expected)
        """,
    "norm_placement": """
        import torch
        from torch import nn

        from andrea_lab.plugin import check_placement
        from {package}.{module} import {cls}


        def test_keeps_the_placement_contract():
            check_placement({cls})                   # alone, and in micro models with every built-in
            check_placement("{dist}:{name}")  # selected by its registered name, as a YAML does


        def test_norms_are_computed_by_the_backend(recording_backend):
            {cls}(8, nn.Identity(), recording_backend)(torch.randn(1, 2, 8))
            assert recording_backend.calls == ["layer_norm"]  # update when you change forward
        """,
    "kernel_backend": """
        import pytest

        from andrea_lab.plugin import check_backend
        from {package}.{module} import {cls}


        def test_matches_the_eager_reference():
            # Every op and its gradient against KernelBackend; skipped (with the reason) when
            # availability() says no.
            check_backend({cls})
            check_backend("{dist}:{name}")


        @pytest.mark.gpu  # skipped without CUDA; ANDREA_REQUIRE_GPU=1 makes that skip a failure
        def test_on_the_gpu():
            check_backend({cls})
        """,
    "norm": """
        import torch

        from andrea_lab.plugin import check_norm
        from {package}.{module} import {cls}


        def test_keeps_the_norm_contract():
            check_norm({cls})                   # alone, and as every norm of micro models with each built-in
            check_norm("{dist}:{name}")  # selected by its registered name, as a YAML does


        def test_computes_through_the_backend(recording_backend):
            {cls}(8, recording_backend)(torch.randn(2, 3, 8))
            assert recording_backend.calls == ["rms_norm"]  # update when you change forward
        """,
    "optimizer": """
        from andrea_lab.plugin import check_optimizer
        from {package}.{module} import {cls}


        def test_keeps_the_optimizer_contract():
            # Trains a micro model; a step without gradients changes nothing; state_dict resumes bit for bit.
            check_optimizer({cls})
            check_optimizer("{dist}:{name}")  # selected by its registered name, as a YAML does
        """,
    "schedule": """
        from andrea_lab.plugin import check_schedule
        from {package}.{module} import {cls}


        def test_keeps_the_schedule_contract():
            check_schedule({cls})
            check_schedule("{dist}:{name}")


        def test_warms_up_linearly():
            schedule = {cls}(warmup_steps=4, decay_steps=100, min_lr_ratio=0.1)
            assert [schedule.multiplier(step) for step in range(4)] == [0.25, 0.5, 0.75, 1.0]
        """,
}

README = """
    # {dist}

    An andrea-lab plugin: the {kind} `{name}`.

    ```bash
    pip install -e '.[test]'
    pytest                                  # the tests use andrea_lab.plugin.testing (installed with andrea-lab)
    andrea plugins --check {name}           # the same checks, from the command line
    andrea fit --config experiments/quickstart.yaml --{config_key} {dist}:{name}
    ```

    `{name}` alone works as long as no other installed distribution registers the same name;
    `{dist}:{name}` always does.
    """

PYPROJECT = """
    [build-system]
    requires = ["setuptools>=69"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "{dist}"
    version = "0.1.0"
    description = "andrea-lab plugin: the {kind} {name}"
    readme = "README.md"
    requires-python = ">=3.10"
    # The plugin contract (contract_version {contract} in the class) is fixed within an andrea-lab
    # minor series; a newer andrea-lab may change it, so the range stops before the next one.
    dependencies = ["andrea-lab{requirement}"]

    [project.optional-dependencies]
    test = ["pytest>=8"]

    # The registration: the name on the left is what a YAML selects ({config_key}: {name}).
    [project.entry-points."andrea_lab.{kind}"]
    {name} = "{package}.{module}:{cls}"

    [tool.setuptools.packages.find]
    where = ["src"]

    [tool.pytest.ini_options]
    testpaths = ["tests"]
    addopts = "-ra --strict-markers"
    """


def compatible_range(version: str = __version__) -> str:
    """``>=0.1,<0.2`` for 0.1.x (a 0.x minor may change the contract), ``>=1.2,<2`` from 1.0 on."""
    major, minor = (int(part) for part in version.split(".")[:2])
    return f">={major}.{minor},<{major}.{minor + 1}" if major == 0 else f">={major}.{minor},<{major + 1}"


def files_for(kind: str, name: str) -> tuple[str, dict[str, str]]:
    """The distribution name and ``{relative path: text}`` of a new plugin package."""
    if kind not in KINDS:
        raise UsageError(f"unknown plugin kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    if not NAME_PATTERN.fullmatch(name):
        raise UsageError(
            f"plugin name {name!r} must be lower case letters, digits and underscores, starting "
            f"with a letter (it is what a YAML selects), e.g. {re.sub('[^a-z0-9_]', '_', name.lower())!r}"
        )
    cls = "".join(part.capitalize() for part in name.split("_"))
    keywords = [word for word in (name, cls) if keyword.iskeyword(word)]
    if keywords:  # `none` -> `class None(...)`: a package with a SyntaxError
        raise UsageError(
            f"plugin name {name!r} (class {cls!r}) is the Python keyword {keywords[0]!r}; "
            f"choose another, e.g. {name + '_x'!r}"
        )
    dist = "andrea-lab-" + name.replace("_", "-")
    values = dict(
        kind=kind,
        name=name,
        config_key=f"model.config.{kind}" if kind in PLUGIN_KINDS else f"model.{kind}",
        dist=dist,
        package=dist.replace("-", "_"),
        module=MODULES[kind],
        cls=cls,
        contract=CONTRACT_VERSION,
        requirement=compatible_range(),
    )

    def render(template: str) -> str:
        return textwrap.dedent(template).lstrip("\n").format(**values)

    package = values["package"]
    return dist, {
        "pyproject.toml": render(PYPROJECT),
        "README.md": render(README),
        f"src/{package}/__init__.py": f'"""{dist}: the andrea-lab {kind} plugin {name}."""\n',
        f"src/{package}/{values['module']}.py": render(CLASSES[kind]),
        f"tests/test_{name}.py": render(TESTS[kind]),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="andrea new-plugin", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("kind", help=f"one of: {', '.join(KINDS)}")
    parser.add_argument("name", help="the name a YAML will select, e.g. squared_tanh")
    parser.add_argument("--dir", type=Path, default=None, help="where to write it (default: ./andrea-lab-NAME)")
    args = parser.parse_args(argv)
    dist, files = files_for(args.kind, args.name)
    root = args.dir or Path(dist)
    check_output_dir(root, "--dir")
    if root.exists() and any(root.iterdir()):
        raise UsageError(f"{root} already exists and is not empty; choose another --dir")
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    print(f"wrote {dist} in {root}:")
    print("\n".join(f"  {relative}" for relative in files))
    print(f"next: pip install -e '{root}[test]' && pytest {root} && andrea plugins --check {dist}:{args.name}")
    return 0
