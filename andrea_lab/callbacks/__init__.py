"""Training callbacks: :class:`StabilityMonitor` (stability metrics and events, ``stability.*`` in a YAML)
, :class:`HeldOutEvaluation` (the end-of-fit held-out loss with its standard error, ``heldout.*``)
and :class:`RunSummary` (``summary.json`` and hparams metrics at the end of every fit, ``summary.*``);
:class:`PreemptionCheckpoint` (SIGTERM/SIGUSR1: a checkpoint at the last completed step, ``preemption.*``)."""

from andrea_lab.callbacks.events import Divergence, DivergenceDetector, SpikeDetector, unigram_entropy
from andrea_lab.callbacks.heldout import HeldOutEvaluation
from andrea_lab.callbacks.preemption import PreemptionCheckpoint
from andrea_lab.callbacks.stability import StabilityMonitor
from andrea_lab.callbacks.summary import RunSummary

__all__ = ["Divergence", "DivergenceDetector", "HeldOutEvaluation", "PreemptionCheckpoint", "RunSummary", "SpikeDetector", "StabilityMonitor", "unigram_entropy"]
