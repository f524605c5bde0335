"""One ``andrea fit`` parser for a sweep's planning: built once, and each distinct command parsed once.

Three steps of ``andrea sweep`` read a planned run's config through the real :class:`AndreaCLI` parser: the speed
rule (each rung's width and steps), the ladder's compute (each rung's N and D) and the preflight (each variant's
command checked). Each used to build a parser of its own for every command it read, although building one (every
class signature of the model, data module, trainer and callbacks read) costs more than parsing with it (measured
here: 0.22 s to build, 0.09 s a parse, against 0.28-0.40 s for a fresh parser and parse), and the three read the
same commands: a variant's first planned run. Within :func:`shared` one parser serves every parse and each
distinct command line is parsed once; outside it every call builds its own, as before (nothing outlives a sweep,
so a config file edited between two sweeps in one process is read again).

A parse stops before any class is instantiated (no model, data or trainer), after LightningCLI's own
``--ckpt_path`` step, exactly where a fit would go on to build them.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from typing import Any, Iterator, Optional, Sequence


class _Built(Exception):
    """Raised from the parser's first parse: LightningCLI's constructor builds the parser and then parses."""

    def __init__(self, cli: Any):
        super().__init__("built")
        self.cli = cli


def _error_text(stderr: str) -> str:
    lines = [line.rstrip() for line in stderr.strip().splitlines() if line.strip()]
    for index, line in enumerate(lines):
        if "error:" in line:
            return " ".join(part.strip() for part in lines[index:])
    return " ".join(lines[-3:]) or "the arguments do not parse"


class FitParser:
    """``andrea fit``'s parser, built on first use; :meth:`parse` answers each distinct command once.

    ``builds`` and ``parses`` count what was done (the sweep's tests read them)."""

    def __init__(self) -> None:
        self._cli: Any = None
        self._results: dict[tuple[str, ...], tuple[Optional[str], Any]] = {}
        self.builds = 0
        self.parses = 0

    def parse(self, fit_args: Sequence[str]) -> tuple[Optional[str], Any]:
        """(None, the ``fit`` section of the parsed config: a copy the caller may change) if ``andrea fit
        <fit_args>`` parses, else (the error message, None)."""
        key = tuple(str(arg) for arg in fit_args)
        if key not in self._results:
            self._results[key] = self._parse(key)
        problem, config = self._results[key]
        return problem, None if config is None else config.clone()

    def _parser(self) -> Any:
        if self._cli is None:
            from andrea_lab.fit.cli import AndreaCLI  # Lightning (~5 s): only when a sweep reads a command

            class ParserOnly(AndreaCLI):
                def parse_arguments(self, parser: Any, args: Any) -> None:
                    raise _Built(self)

            try:
                ParserOnly(args=["fit"])
            except _Built as built:
                self._cli = built.cli
            self.builds += 1
        return self._cli

    def _parse(self, fit_args: tuple[str, ...]) -> tuple[Optional[str], Any]:
        from andrea_lab.fit.cli import AndreaCLI  # Lightning: only when a sweep reads a command

        self.parses += 1
        stderr = io.StringIO()
        logging.disable(logging.INFO)  # "Seed set to ..." and the like
        try:
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # e.g. "args given while sys.argv has others": intended here
                    cli = self._parser()
                    cli.config = None
                    AndreaCLI.parse_arguments(cli, cli.parser, ["fit", *fit_args])  # AndreaCLI's checks included
                    cli._parse_ckpt_path()
        except SystemExit:
            return _error_text(stderr.getvalue()), None
        except Exception as exc:  # the parser raises (exit_on_error=False) instead of exiting
            if type(exc).__name__ == "ArgumentError":
                return str(exc), None
            return f"{type(exc).__name__}: {exc}", None
        finally:
            logging.disable(logging.NOTSET)
        config = cli.config
        return None, config.get("fit", config)


_shared: Optional[FitParser] = None


@contextlib.contextmanager
def shared() -> Iterator[FitParser]:
    """Within it, :func:`parse` uses one :class:`FitParser` (reentrant: an inner ``shared`` uses the outer one).
    Also a decorator: ``andrea sweep``'s ``main`` is planned within it."""
    global _shared
    if _shared is not None:
        yield _shared
        return
    _shared = FitParser()
    try:
        yield _shared
    finally:
        _shared = None


def parse(fit_args: Sequence[str]) -> tuple[Optional[str], Any]:
    """``andrea fit <fit_args>`` parsed: by the shared parser within :func:`shared`, else by one of its own."""
    return (_shared or FitParser()).parse(fit_args)
