"""Sweeps: run every variant x learning rate x seed of a suite, resumably (``andrea sweep``).

* :mod:`andrea_lab.experiments.sweep.suite` — the suite file and its validation;
* :mod:`andrea_lab.experiments.sweep.plan` — the combinations, their directories and commands (the run states
  and markers are :mod:`andrea_lab.runs.directory`'s);
* :mod:`andrea_lab.experiments.sweep.preflight` — parse every variant's command before anything runs;
* :mod:`andrea_lab.experiments.sweep.runner` — the runs, markers, progress and the final report, through an executor
  (:mod:`andrea_lab.experiments.sweep.executors`; the default forks fits from
  :mod:`andrea_lab.experiments.sweep.warm_worker`).
"""

from andrea_lab.experiments.sweep.plan import RunSpec, plan_sweep
from andrea_lab.experiments.sweep.suite import Suite, SuiteError, Variant, format_lr, load_suite
from andrea_lab.runs.directory import run_state

__all__ = ["RunSpec", "Suite", "SuiteError", "Variant", "format_lr", "load_suite", "plan_sweep", "run_state"]
