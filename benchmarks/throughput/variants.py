"""What the benchmark trains: the three variants and the ablations, one row each of :data:`TABLE`.

An ablation changes exactly one thing against the variant it names as its ``kind`` ((a) lightning,
(b) bare, (c) hf); the runners read the row's fields and never branch on a variant's name.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from andrea_lab.model.components import mlp_hidden, resolve_components
from andrea_lab.model.config import AndreaConfig

from .settings import ADAMW_HPARAMS, BenchSettings


def _same(base: type) -> type:
    return base


def _no_check(base: type) -> type:
    class NoCheck(base):  # type: ignore[misc, valid-type]
        def configure_callbacks(self):  # without its non-finite guard: no grad norm, no host sync
            return []

    return NoCheck


def _no_log(base: type) -> type:
    class NoLog(base):  # type: ignore[misc, valid-type]
        def training_step(self, batch, batch_idx):
            x, y = batch
            _, loss = self.model(x, y)
            self.nonfinite.last_loss = loss.detach()
            return loss

        def log(self, *args, **kwargs):  # the non-finite guard's grad-norm log (pl_module.log) too
            return None

    return NoLog


@dataclass(frozen=True)
class Ablation:
    """One way of training in the benchmark: a variant ((a), (b), (c)) or an ablation of one."""

    name: str
    kind: str  # the runner: "lightning", "bare" or "hf" (an ablation: what it changes)
    label: str  # the description (the JSON's ``label``)
    short: str  # its row in the printed table
    module: Callable[[type], type] = _same  # (a), (b): the AndreaLM subclass trained
    fused: bool = True  # AdamW's fused kernel (else foreach)
    hf_activation: str = "gelu_new"  # (c): GPT2Config.activation_function
    compile: bool = False  # torch.compile the model (also on with --compile)
    logger: bool = True  # (a): write TensorBoard (with --logger tensorboard)
    progress_bar: bool = False  # (a): Lightning's TQDM progress bar
    cli_callbacks: bool = False  # (a): + andrea fit's StabilityMonitor and RunSummary
    num_workers: Optional[int] = None  # (a): DataLoader workers instead of --num-workers
    times_check: bool = False  # (b): also time AndreaLM's grad-norm + non-finite check alone
    clip: Optional[float] = None  # (a): trainer.gradient_clip_val (andrea-120m.yaml clips at 1.0)
    model_config: tuple[tuple[str, Any], ...] = ()  # (a), (b): AndreaConfig fields changed (model.config.X)
    lm_args: tuple[tuple[str, Any], ...] = ()  # (a), (b): AndreaLM arguments changed (model.X)

    def configured(self, config: AndreaConfig) -> AndreaConfig:
        """``config`` with this row's ``model_config`` changes (the config itself when there are none)."""
        return dataclasses.replace(config, **dict(self.model_config)) if self.model_config else config

    def unavailable(self, config: AndreaConfig) -> Optional[str]:
        """Why this row cannot run with this andrea-lab (an option it sets is not one here), else None."""
        from andrea_lab.fit.module import AndreaLM
        from andrea_lab.model.registry import PluginError

        fields = {f.name for f in dataclasses.fields(AndreaConfig)}
        unknown = [f"model.config.{k}" for k, _ in self.model_config if k not in fields]
        unknown += [f"model.{k}" for k, _ in self.lm_args if k not in inspect.signature(AndreaLM).parameters]
        if unknown:
            return f"{', '.join(unknown)}: not an option of this andrea-lab"
        try:
            resolve_components(self.configured(config))
        except PluginError as exc:
            return str(exc).splitlines()[0]
        return None


TABLE = [
    Ablation("lightning", "lightning", "(a) AndreaLM + Lightning Trainer", "(a) AndreaLM + Lightning Trainer"),
    Ablation("bare", "bare", "(b) Andrea, bare PyTorch loop", "(b) Andrea, bare loop", times_check=True),
    Ablation("hf", "hf", "(c) HF GPT2LMHeadModel, bare loop", "(c) HF GPT2LMHeadModel, bare loop"),
    Ablation(
        "a-nocheck",
        "lightning",
        "(a) without AndreaLM's grad-norm + non-finite check (no host sync)",
        "(a) - grad-norm/non-finite check",
        module=_no_check,
    ),
    Ablation(
        "a-nolog",
        "lightning",
        "(a) without any self.log in the training step",
        "(a) - self.log in the step",
        module=_no_log,
    ),
    Ablation(
        "a-progbar",
        "lightning",
        "(a) with Lightning's TQDM progress bar (andrea fit's default)",
        "(a) + progress bar",
        progress_bar=True,
    ),
    Ablation(
        "a-cli",
        "lightning",
        "(a) as andrea fit runs it: + StabilityMonitor, RunSummary and the progress bar",
        "(a) + andrea fit's callbacks, progress bar",
        progress_bar=True,
        cli_callbacks=True,
    ),
    Ablation(
        "a-nologger",
        "lightning",
        "(a) with logger=False (self.log still collects, nothing is written)",
        "(a) - TensorBoard logger",
        logger=False,
    ),
    Ablation(
        "a-unfused",
        "lightning",
        "(a) with the unfused (foreach) AdamW and so a per-step non-finite host check",
        "(a) with foreach AdamW",
        fused=False,
    ),
    Ablation(
        "a-clip",
        "lightning",
        "(a) clipping at 1.0 with the fused AdamW: AndreaLM clips with the norm it "
        "measured (andrea-120m.yaml; any precision)",
        "(a) + clip 1.0, fused AdamW",
        clip=1.0,
    ),
    Ablation(
        "a-clip-unfused",
        "lightning",
        "(a) clipping at 1.0 with the foreach AdamW, Lightning's own clip (the alternative under bf16-mixed)",
        "(a) + clip 1.0, foreach AdamW",
        clip=1.0,
        fused=False,
    ),
    Ablation(
        "a-workers",
        "lightning",
        "(a) with DataLoader num_workers=1 (+ persistent workers)",
        "(a) + num_workers=1",
        num_workers=1,
    ),
    Ablation("b-unfused", "bare", "(b) with the unfused (foreach) AdamW", "(b) with foreach AdamW", fused=False),
    Ablation(
        "b-copy",
        "bare",
        "(b) again, unchanged: an A/A control of the method's noise and position bias",
        "(b) again (A/A control)",
    ),
    Ablation(
        "c-gelu",
        "hf",
        "(c) with activation_function='gelu_pytorch_tanh' (fused GELU kernel)",
        "(c) + gelu_pytorch_tanh",
        hf_activation="gelu_pytorch_tanh",
    ),
    Ablation(
        "b-compile",
        "bare",
        "(b) with torch.compile of the model (what model.compile=true does in (a))",
        "(b) + torch.compile",
        compile=True,
    ),
    Ablation("c-compile", "hf", "(c) with torch.compile of the model", "(c) + torch.compile", compile=True),
    # The stability interventions (docs/stability.md): what each costs a fit, against (a).
    Ablation(
        "qk_norm", "lightning", "(a) with model.config.qk_norm true", "(a) + qk_norm", model_config=(("qk_norm", True),)
    ),
    Ablation(
        "rmsnorm",
        "lightning",
        "(a) with model.config.norm andrea-lab:rmsnorm",
        "(a) + RMSNorm",
        model_config=(("norm", "andrea-lab:rmsnorm"),),
    ),
    Ablation(
        "attn_softcap",
        "lightning",
        "(a) with model.config.attn_logit_softcap 50 (off SDPA: flex_attention on CUDA, explicit attention on the CPU)",
        "(a) + attention soft cap 50",
        model_config=(("attn_logit_softcap", 50.0),),
    ),
    Ablation(
        "final_softcap",
        "lightning",
        "(a) with model.config.final_logit_softcap 30",
        "(a) + final soft cap 30",
        model_config=(("final_logit_softcap", 30.0),),
    ),
    Ablation("z_loss", "lightning", "(a) with model.z_loss 1e-4", "(a) + z-loss 1e-4", lm_args=(("z_loss", 1e-4),)),
]
VARIANTS: dict[str, Ablation] = {row.name: row for row in TABLE}
#: The three ways of training (``--variants``); every other row is an ablation (``--ablations``).
BASE = ("lightning", "bare", "hf")
ABLATIONS: dict[str, Ablation] = {name: row for name, row in VARIANTS.items() if name not in BASE}


def andrea_lm(config: AndreaConfig, settings: BenchSettings, variant: Ablation = VARIANTS["lightning"]):
    """AndreaLM with the benchmark's hyperparameters (or the variant's subclass of it)."""
    from andrea_lab.fit.module import AndreaLM

    cls = variant.module(AndreaLM)
    if not variant.fused:
        cls = type(f"Unfused{cls.__name__}", (cls,), {"use_fused_adamw": False})
    return cls(
        config=variant.configured(config),
        decay_steps=settings.warmup + settings.steps,
        compile=settings.compile,
        **ADAMW_HPARAMS,
        **dict(variant.lm_args),
    )


def adamw_like_andrea(model: torch.nn.Module, device: torch.device, decay_steps: int, fused: bool = True):
    """What ``AndreaLM.configure_optimizers`` builds, for any model (the library's ``adamw_with_schedule``)."""
    from andrea_lab.fit.optim import adamw_with_schedule

    hp = ADAMW_HPARAMS
    return adamw_with_schedule(
        model,
        hp["lr"],
        hp["betas"],
        hp["eps"],
        hp["weight_decay"],
        hp["warmup_steps"],
        decay_steps,
        hp["min_lr_ratio"],
        fused=fused,
    )


def hf_unavailable(config: AndreaConfig) -> Optional[str]:
    """Why (c) cannot run here (None when it can): transformers missing, or no GPT-2 twin of the config."""
    if importlib.util.find_spec("transformers") is None:
        return "transformers is not installed (pip install -e '.[bench]')"
    return hf_twin_problem(config)


def hf_twin_problem(config: AndreaConfig) -> Optional[str]:
    """Why HF GPT-2 cannot have this config's architecture (None when it can): GPT-2 is pre-norm, with
    the tanh GELU (ungated) and biases. The one check (c)'s model and its skip reason use. Compares the
    resolved plugin classes: a preset names them qualified (``andrea-lab:pre``)."""
    from andrea_lab.model.builtin.activations import GELU
    from andrea_lab.model.builtin.placements import PreNorm
    from andrea_lab.model.registry import resolve

    if (
        resolve("norm_placement", config.norm_placement) is not PreNorm
        or resolve("activation", config.activation) is not GELU
        or not config.bias
    ):
        return "the preset's architecture is not GPT-2's (pre-norm, GELU, biases)"
    return None


def hf_gpt2(config: AndreaConfig, activation: str = "gelu_new"):
    """``GPT2LMHeadModel`` of ANDREA's shape, SDPA attention, every dropout 0, built from a config
    (no weights are downloaded)."""
    problem = hf_twin_problem(config)
    if problem:
        raise ValueError(f"HF GPT-2 of this shape cannot be built: {problem}")
    from transformers import GPT2Config, GPT2LMHeadModel

    hf_config = GPT2Config(
        vocab_size=config.vocab_size,
        n_positions=config.block_size,
        n_embd=config.d_model,
        n_layer=config.n_layer,
        n_head=config.n_head,
        n_inner=mlp_hidden(config),
        activation_function=activation,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=config.layer_norm_eps,
        initializer_range=config.init_std,
        tie_word_embeddings=True,
        use_cache=False,
        bos_token_id=None,
        eos_token_id=None,
    )
    return GPT2LMHeadModel._from_config(hf_config, attn_implementation="sdpa")
