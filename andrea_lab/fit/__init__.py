"""One run: :class:`AndreaLM` (the LightningModule), its LightningCLI (``andrea fit``), how it trains
(optimizer and schedule, non-finite policy, RNG state, ``init_from``) and the callbacks every fit brings:

* :class:`StabilityMonitor` (:mod:`andrea_lab.fit.stability`: metrics, events and the probe, ``stability.*``);
* :class:`HeldOutEvaluation` (the end-of-fit held-out loss with its standard error, ``heldout.*``);
* :class:`RunSummary` (``summary.json`` and hparams metrics at the end of every fit, ``summary.*``);
* :class:`PreemptionCheckpoint` (SIGTERM/SIGUSR1: a checkpoint at the last completed step, ``preemption.*``).

The names below are imported on first use: importing one module of the package loads only what it needs.
"""

import importlib

_LAZY = {
    "AndreaLM": "andrea_lab.fit.module",
    "AndreaCLI": "andrea_lab.fit.cli",
    "AndreaTensorBoardLogger": "andrea_lab.fit.loggers",
    "StabilityMonitor": "andrea_lab.fit.stability.monitor",
    "Divergence": "andrea_lab.fit.stability.events",
    "DivergenceDetector": "andrea_lab.fit.stability.events",
    "SpikeDetector": "andrea_lab.fit.stability.events",
    "unigram_entropy": "andrea_lab.fit.stability.events",
    "HeldOutEvaluation": "andrea_lab.fit.heldout",
    "PreemptionCheckpoint": "andrea_lab.fit.preemption",
    "RunSummary": "andrea_lab.fit.summary",
}
__all__ = sorted(_LAZY)


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'andrea_lab.fit' has no attribute {name!r}")
