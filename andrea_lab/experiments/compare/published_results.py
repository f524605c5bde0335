"""The published results the committed suites' claims cite (``published: <key>``), each once.

Why one list: the same finding (Xiong et al.'s "Post-LN without warmup trains markedly worse") is cited by
claims in five suites; written out in each, the copies drifted. Each entry says what the paper measured it on.
A figure written ``not stated`` is one this project has not taken from the paper (absent there, or not
checked against it): a model size or token count is given only where the paper's setup says it plainly.
Results are stated in the direction of the claims that cite them.
"""

from __future__ import annotations

from andrea_lab.experiments.compare.published import NOT_STATED, Published

_XIONG = "Xiong et al. 2020"
_XIONG_MODELS = "6-layer Transformers (IWSLT14 De-En, WMT14 En-De) and BERT-base (12 layers, 768 wide)"
_XIONG_METRIC = "BLEU, validation loss"
_SHAZEER_MODEL = "T5-base encoder-decoder (12+12 layers, d_model 768), parameters matched"
_SHAZEER_TOKENS = "65,536 steps of 128 sequences x 512"
_SHAZEER_METRIC = "held-out log-perplexity (C4 span filling)"
_KIM = "Kim et al. 2025 (Peri-LN)"
_KIM_MODELS = "decoder-only Transformers of 400M-3.2B parameters"
_OLMO = "Team OLMo 2025 (OLMo 2)"
_OLMO_METRIC = "training-loss and gradient-norm spikes"
_WORTSMAN = "Wortsman et al. 2023"
_WORTSMAN_MODELS = "decoder-only Transformers of 9.4M-1.2B parameters (C4)"
_DEEPNET_MODELS = "encoder-decoder Transformers up to 1,000 layers (machine translation)"

PUBLISHED: dict[str, Published] = {
    "shazeer2020_swiglu_gelu": Published(
        "Shazeer 2020, Table 1",
        "SwiGLU 1.944 vs GELU 1.983 log-perplexity (-0.039)",
        "loss",
        _SHAZEER_MODEL,
        _SHAZEER_TOKENS,
        _SHAZEER_METRIC,
    ),
    "shazeer2020_gelu_relu": Published(
        "Shazeer 2020, Table 1",
        "GELU 1.983 vs ReLU 1.997 log-perplexity (-0.014)",
        "loss",
        _SHAZEER_MODEL,
        _SHAZEER_TOKENS,
        _SHAZEER_METRIC,
    ),
    "xiong2020_pre_ln_lower": Published(
        _XIONG, "Pre-LN converges faster and lower than Post-LN", "loss", _XIONG_MODELS, NOT_STATED, _XIONG_METRIC
    ),
    "xiong2020_post_ln_gradients": Published(
        _XIONG,
        "Post-LN's large gradients near the output at init make it fail without care; Pre-LN does not",
        "gradient_norm",
        _XIONG_MODELS,
        NOT_STATED,
        "gradient norm per layer at init; BLEU",
    ),
    "xiong2020_gradients_uneven": Published(
        _XIONG,
        "Post-LN's gradients at init are uneven across layers and it needs warmup; Pre-LN's are not",
        "gradient_norm",
        _XIONG_MODELS,
        NOT_STATED,
        "gradient norm per layer at init",
    ),
    "xiong2020_post_ln_needs_warmup": Published(
        _XIONG,
        "Post-LN without warmup trains markedly worse; warmup is essential to it",
        "loss",
        _XIONG_MODELS,
        NOT_STATED,
        _XIONG_METRIC,
    ),
    "xiong2020_post_ln_nowarmup_fails": Published(
        _XIONG,
        "Post-LN without warmup fails to train well at the usual LRs (a far worse end result, not a blow-up)",
        "loss",
        _XIONG_MODELS,
        NOT_STATED,
        _XIONG_METRIC,
    ),
    "xiong2020_warmup_length": Published(
        _XIONG, "Post-LN's result depends on the warmup length", "loss", _XIONG_MODELS, NOT_STATED, _XIONG_METRIC
    ),
    "xiong2020_pre_ln_no_warmup": Published(
        _XIONG,
        "Pre-LN trains well without warmup (so warmup should matter little to it)",
        "loss",
        _XIONG_MODELS,
        NOT_STATED,
        _XIONG_METRIC,
    ),
    "kim2025_peri_ln_lower": Published(
        _KIM, "Peri-LN trains to a lower loss than Pre-LN", "loss", _KIM_MODELS, NOT_STATED, "pre-training loss"
    ),
    "kim2025_pre_ln_spikes": Published(
        _KIM,
        "Pre-LN's hidden states grow and its runs spike or diverge; Peri-LN's do not",
        "blew_up",
        _KIM_MODELS,
        NOT_STATED,
        "loss spikes and divergences",
    ),
    "olmo2025_reordered_stable": Published(
        _OLMO,
        "the reordered norm (with QK-norm) made training more stable than pre-norm",
        "blew_up",
        NOT_STATED,
        NOT_STATED,
        _OLMO_METRIC,
    ),
    "olmo2025_reordered_qk_stable": Published(
        _OLMO,
        "the reordered norm together with QK-norm made training more stable",
        "blew_up",
        NOT_STATED,
        NOT_STATED,
        _OLMO_METRIC,
    ),
    "wang2022_deepnorm": Published(
        "Wang et al. 2022 (DeepNet)",
        "DeepNorm lets post-norm train stably where plain Post-LN fails, more so with depth",
        "blew_up",
        _DEEPNET_MODELS,
        NOT_STATED,
        "whether training diverged; BLEU",
    ),
    "wortsman2023_sensitivity_grows": Published(
        _WORTSMAN,
        "without qk-layernorm the LR sensitivity grows with model size; with it, it stays flat",
        "lr_sensitivity",
        _WORTSMAN_MODELS,
        NOT_STATED,
        "final loss over an LR sweep (LR sensitivity)",
    ),
    "wortsman2023_qk_norm_sensitivity": Published(
        _WORTSMAN,
        "qk-layernorm lowers the LR sensitivity",
        "lr_sensitivity",
        _WORTSMAN_MODELS,
        NOT_STATED,
        "final loss over an LR sweep (LR sensitivity)",
    ),
    "wortsman2023_logit_growth": Published(
        _WORTSMAN,
        "attention-logit growth makes high-LR runs diverge; qk-layernorm prevents it",
        "blew_up",
        _WORTSMAN_MODELS,
        NOT_STATED,
        "final loss at high LR; attention logits",
    ),
    "jordan2024_muon_steps": Published(
        "Jordan et al. 2024 (modded-nanogpt)",
        "Muon reaches AdamW's loss in fewer steps",
        "steps_to_loss",
        "GPT-2 small (124M parameters, FineWeb)",
        NOT_STATED,
        "steps to a target validation loss",
    ),
    "chen2023_lion_lm": Published(
        "Chen et al. 2023",
        "Lion matches or beats AdamW on language modelling",
        "loss",
        NOT_STATED,
        NOT_STATED,
        "log-perplexity",
    ),
    "defazio2024_schedule_free": Published(
        "Defazio et al. 2024",
        "schedule-free AdamW matches or beats a tuned cosine schedule",
        "loss",
        NOT_STATED,
        NOT_STATED,
        "validation loss",
    ),
}
