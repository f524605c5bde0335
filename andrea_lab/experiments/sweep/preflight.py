"""Check every variant's command line before any run starts, so a typo fails in seconds, not hours in.

Each variant's ``fit`` arguments are parsed by the real :class:`AndreaCLI` parser (stopping before any
class is instantiated: no model, no data, no trainer), which rejects unknown keys and values of the
wrong type, and its ``model.config`` is validated as an :class:`AndreaConfig` (unknown plugin names,
d_model not divisible by n_head, ...). Costs one import of Lightning, one parser built for the whole sweep and a
parse per distinct command (:mod:`andrea_lab.experiments.sweep.fit_parser`: the speed rule and the ladder's
compute read the same commands). The corpora the variants read are collected on the way, for the warm workers to
resolve once.
"""

from __future__ import annotations

from typing import Optional, Sequence

from andrea_lab.errors import AndreaError
from andrea_lab.experiments.sweep import fit_parser
from andrea_lab.experiments.sweep.plan import RunSpec, first_run_per_variant
from andrea_lab.experiments.sweep.suite import SuiteError


def _parsed(fit_args: Sequence[str]):
    """``andrea fit <fit_args>`` parsed by the real parser, stopped before any class is instantiated: (None, the
    parsed config) if the arguments parse, else (the error message, None). Within a sweep one parser serves
    every command, each parsed once (:mod:`andrea_lab.experiments.sweep.fit_parser`)."""
    return fit_parser.parse(fit_args)


def model_config_from(config):
    """The :class:`AndreaConfig` of a parsed config (:func:`parsed_config`)."""
    from andrea_lab.model.config import AndreaConfig  # torch: `andrea sweep --dry-run` starts without it

    model_config = config.model.config
    return AndreaConfig(**(dict(vars(model_config)) if hasattr(model_config, "__dict__") else dict(model_config)))


def parse_command(fit_args: Sequence[str]) -> tuple[Optional[str], Optional[tuple[str, str]]]:
    """Parse ``andrea fit <fit_args>`` and validate its model config: (None, its corpus as ``(data.corpus,
    data.text_field)``) if it is valid, else (the error message, None)."""
    from andrea_lab.model.components import resolve_components  # torch: `andrea sweep --dry-run` starts without it
    from andrea_lab.model.config import ConfigError  # torch: `andrea sweep --dry-run` starts without it
    from andrea_lab.model.registry import PluginError  # torch: `andrea sweep --dry-run` starts without it

    problem, config = _parsed(fit_args)
    if problem is not None:
        return problem, None
    try:
        resolve_components(model_config_from(config))
    except (ConfigError, PluginError, TypeError) as exc:
        return f"model.config: {exc}", None
    try:
        check_training(config)
    except AndreaError as exc:  # ConfigError, PluginError, a missing optimizer package
        return f"model: {exc}", None
    return None, _corpus(config)


def check_training(config) -> None:
    """The training arguments of a parsed config checked as AndreaLM checks them (ranges, the optimizer and
    schedule plugins and their declared options), so a bad ``model.optimizer_args`` fails the preflight."""
    from andrea_lab.fit.args import TrainingArgs  # torch: `andrea sweep --dry-run` starts without it
    from andrea_lab.fit.optim import OptimizerChoice  # torch: `andrea sweep --dry-run` starts without it

    model = config.model
    OptimizerChoice.of(TrainingArgs.from_arguments(dict(vars(model)) if hasattr(model, "__dict__") else model)).check()


def parsed_config(fit_args: Sequence[str]):
    """The whole config ``andrea fit <fit_args>`` parses to (a jsonargparse namespace), read as the preflight
    reads it; :class:`SuiteError` if the arguments do not parse (the sweep's speed rule reads a rung from it)."""
    problem, config = _parsed(fit_args)
    if problem is not None:
        raise SuiteError(f"andrea fit {' '.join(fit_args)}: {problem}")
    return config


def model_config_of(fit_args: Sequence[str]):
    """The :class:`AndreaConfig` ``andrea fit <fit_args>`` builds, read as the preflight reads it (the real parser:
    the base config, then every override in order). :class:`SuiteError` if the arguments do not parse,
    :class:`ConfigError` if the model config is invalid."""
    problem, config = _parsed(fit_args)
    if problem is not None:
        raise SuiteError(f"andrea fit {' '.join(fit_args)}: {problem}")
    return model_config_from(config)


def _corpus(config) -> Optional[tuple[str, str]]:
    data = config.get("data") if hasattr(config, "get") else None
    corpus = data.get("corpus") if data is not None and hasattr(data, "get") else None
    return None if corpus is None else (str(corpus), str(data.get("text_field", "text")))


def check_command(fit_args: Sequence[str]) -> str | None:
    """None if ``andrea fit <fit_args>`` parses and its model config is valid, else the error message."""
    return parse_command(fit_args)[0]


def preflight(specs: Sequence[RunSpec]) -> tuple[list[str], list[tuple[str, str]]]:
    """One problem per variant whose command does not parse (checked on its first planned run), and the
    corpora the valid ones read (for the warm workers to resolve once:
    :mod:`andrea_lab.experiments.sweep.warm_worker`)."""
    problems: list[str] = []
    corpora: list[tuple[str, str]] = []
    for spec in first_run_per_variant(specs):
        problem, corpus = parse_command(spec.fit_args)
        if problem:
            at_scale = "" if spec.scale is None else f" at scale {spec.scale!r}"
            problems.append(f"variant {spec.variant!r}{at_scale}: {problem}")
        elif corpus is not None and corpus not in corpora:
            corpora.append(corpus)
    return problems, corpora


def check_variants(specs: Sequence[RunSpec]) -> list[str]:
    """One problem per variant whose command does not parse (checked on its first planned run)."""
    return preflight(specs)[0]
