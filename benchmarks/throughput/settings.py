"""What one benchmark run is asked to do (``BenchSettings``, from the command line) and its defaults."""

from __future__ import annotations

from dataclasses import dataclass, field

#: Batch size and block size when not given: one CPU step of tiny/small takes about a second or
#: a few seconds on 2 cores (so tiny + small finish in a few minutes); on CUDA the experiment's.
CPU_DEFAULTS = {"andrea-micro": (8, 64), "andrea-tiny": (8, 128), "andrea-small": (2, 256), "andrea-120m": (1, 256)}
CUDA_DEFAULT_BATCH = 16

#: The targets of the issue, checked against this run where they apply.
TARGETS = {
    "lightning_over_bare": 0.97,  # CPU, tiny and a mid-sized preset
    "bare_over_hf": 1.2,  # CPU, mid-sized preset
    "cpu_fp32_mfu": 0.35,  # CPU fp32, d_model >= 512
    "cuda_bf16_mfu": 0.45,  # H100/H200, andrea-120m, bf16-mixed, compile
}

#: AndreaLM's optimizer settings for every variant (the HF model gets the same AdamW and schedule).
ADAMW_HPARAMS = dict(lr=6e-4, warmup_steps=100, min_lr_ratio=0.1, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)


@dataclass
class BenchSettings:
    preset: str
    batch_size: int
    block_size: int
    steps: int
    warmup: int
    rounds: int
    device: str
    precision: str
    compile: bool
    num_workers: int
    logger: str
    log_every_n_steps: int
    corpus: str
    seed: int
    variants: list[str]
    ablations: list[str] = field(default_factory=list)
    schedule: str = "steps"
    memory_pass: bool = True
