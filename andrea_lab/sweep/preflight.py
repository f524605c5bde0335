"""Check every variant's command line before any run starts, so a typo fails in seconds, not hours in.

Each variant's ``fit`` arguments are parsed by the real :class:`AndreaCLI` parser (stopping before any
class is instantiated: no model, no data, no trainer), which rejects unknown keys and values of the
wrong type, and its ``model.config`` is validated as an :class:`AndreaConfig` (unknown plugin names,
d_model not divisible by n_head, ...). Costs one import of Lightning and about a second per variant.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Sequence

from andrea_lab.sweep.plan import RunSpec


class _Parsed(Exception):
    def __init__(self, config):
        super().__init__("parsed")
        self.config = config


def _error_text(stderr: str) -> str:
    lines = [line.rstrip() for line in stderr.strip().splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if "error:" in line:
            return " ".join(part.strip() for part in lines[index:])
    return " ".join(lines[-3:]) or "the arguments do not parse"


def check_command(fit_args: Sequence[str]) -> str | None:
    """None if ``andrea fit <fit_args>`` parses and its model config is valid, else the error message."""
    from andrea_lab.config import AndreaConfig, ConfigError
    from andrea_lab.lightning_cli import AndreaCLI
    from andrea_lab.registry import PluginError

    class ParseOnly(AndreaCLI):
        def before_instantiate_classes(self) -> None:
            raise _Parsed(self.config)

    stderr = io.StringIO()
    logging.disable(logging.INFO)  # "Seed set to ..." and the like
    try:
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()), \
                warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "args given while sys.argv has others": intended here
            ParseOnly(args=["fit", *fit_args])
    except _Parsed as parsed:
        config = parsed.config.get("fit", parsed.config)
        model_config = config.model.config
        fields = dict(vars(model_config)) if hasattr(model_config, "__dict__") else dict(model_config)
        try:
            AndreaConfig(**fields).components()
        except (ConfigError, PluginError, TypeError) as exc:
            return f"model.config: {exc}"
        return None
    except SystemExit:
        return _error_text(stderr.getvalue())
    except Exception as exc:  # the parser raises (exit_on_error=False) instead of exiting
        if type(exc).__name__ == "ArgumentError":
            return str(exc)
        return f"{type(exc).__name__}: {exc}"
    finally:
        logging.disable(logging.NOTSET)
    return "the arguments parsed but the check did not stop before instantiation"  # pragma: no cover


def check_variants(specs: Sequence[RunSpec]) -> list[str]:
    """One problem per variant whose command does not parse (checked on its first planned run)."""
    problems = []
    seen = set()
    for spec in specs:
        if spec.variant in seen:
            continue
        seen.add(spec.variant)
        fit_index = spec.command.index("fit")
        problem = check_command(spec.command[fit_index + 1:])
        if problem:
            problems.append(f"variant {spec.variant!r}: {problem}")
    return problems
