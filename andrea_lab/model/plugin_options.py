"""The declared options of an optimizer or schedule plugin (``model.optimizer_args``/``model.schedule_args``).

A plugin's own options arrive from a YAML, a suite or a checkpoint as a free mapping, and a value the update
rule cannot use (Muon's momentum NaN, ``ns_steps`` 1e9 or -1, Lion's betas above 1) used to surface as a
traceback in the middle of a fit, after its run directory was claimed, or not at all. So each plugin declares
its options (:class:`Option`: type and valid range) in its ``options`` class attribute, and
:func:`checked_options` refuses a bad mapping in one line naming the key, the value and what is valid, before
the plugin is constructed; AndreaLM constructs it when the module is built, before any run directory exists.
The keys the framework passes itself (``lr``, ``warmup_steps``, ...) are refused by name with where to set them.

A plugin written before declarations existed (``options`` left ``None``) is still constructed; its keys are
checked against its signature, its numbers for finiteness. ``andrea plugins --check`` and the test kit fail it
until it declares them (:func:`declaration_problems`).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from andrea_lab.model.config import ConfigError

#: What the framework passes every plugin of a kind itself (never an option), and where a user sets it.
FRAMEWORK_KEYS: dict[str, dict[str, str]] = {
    "optimizer": {
        "lr": "model.lr",
        "betas": "model.betas",
        "eps": "model.eps",
        "weight_decay": "model.weight_decay",
        "params": "the parameter groups of model/param_groups.py",
        "fused": "andrea-lab, per device and precision",
    },
    "schedule": {
        "warmup_steps": "model.warmup_steps",
        "decay_steps": "model.decay_steps",
        "min_lr_ratio": "model.min_lr_ratio",
    },
}


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclass(frozen=True)
class Option:
    """One option of a plugin: its type (``int``, ``float``, ``bool`` or ``str``), for numbers the valid range
    (``low``/``high``, either end open with ``low_open``/``high_open``; numbers are always finite), for text the
    ``choices``, and ``length`` for a list of that many such values (Lion's ``lion_betas``)."""

    type: type
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    choices: tuple[str, ...] = ()
    length: Optional[int] = None

    def __post_init__(self) -> None:
        if self.type not in (int, float, bool, str):
            raise TypeError(f"an Option's type is int, float, bool or str, not {self.type!r}")

    def describe(self) -> str:
        """What is valid, in words: ``a float in [0, 1)``, ``a list of 2 floats in [0, 1)``."""
        if self.type is bool:
            one = "true or false"
        elif self.type is str:
            one = "one of " + ", ".join(repr(c) for c in self.choices) if self.choices else "a string"
        else:
            noun = "an integer" if self.type is int else "a finite float"
            low = "-inf" if self.low is None else f"{self.low:g}"
            high = "inf" if self.high is None else f"{self.high:g}"
            left = "(" if self.low_open or self.low is None else "["
            right = ")" if self.high_open or self.high is None else "]"
            one = f"{noun} in {left}{low}, {high}{right}" if (self.low, self.high) != (None, None) else noun
        if self.length is None:
            return one
        return f"a list of {self.length} values, each {one}"

    def _valid_one(self, value: Any) -> bool:
        if self.type is bool:
            return isinstance(value, bool)
        if self.type is str:
            return isinstance(value, str) and (not self.choices or value in self.choices)
        if not _number(value) or (self.type is int and not isinstance(value, int)) or not math.isfinite(value):
            return False
        above = self.low is None or (value > self.low if self.low_open else value >= self.low)
        below = self.high is None or (value < self.high if self.high_open else value <= self.high)
        return above and below

    def valid(self, value: Any) -> bool:
        if self.length is None:
            return self._valid_one(value)
        return (
            isinstance(value, (list, tuple))
            and len(value) == self.length
            and all(self._valid_one(item) for item in value)
        )

    def value(self, value: Any) -> Any:
        """A valid value as the plugin gets it: a float for a float option (YAML's ``1`` too), a tuple for a list."""
        if self.length is not None:
            return tuple(self.value_one(item) for item in value)
        return self.value_one(value)

    def value_one(self, value: Any) -> Any:
        return float(value) if self.type is float else value

    def edges(self) -> list[Any]:
        """The closed ends of a number's range, as values (for the contract check: the plugin must work there)."""
        if self.type not in (int, float):
            return []
        ends = [(self.low, self.low_open), (self.high, self.high_open)]
        closed = [self.type(end) for end, open_ in ends if end is not None and not open_]
        return [end if self.length is None else (end,) * self.length for end in closed]


def declared(kind: str, cls: type) -> Optional[Mapping[str, Option]]:
    """The options ``cls`` declares, ``{}`` for one whose constructor takes none, None when undeclared."""
    options = getattr(cls, "options", None)
    if options is not None:
        return options
    return {} if not own_keywords(kind, cls) else None


def own_keywords(kind: str, cls: type) -> list[str]:
    """The keywords of ``cls``'s constructor beyond the framework's (what its options must declare)."""
    framework = {*FRAMEWORK_KEYS[kind], "self"}
    parameters = inspect.signature(cls).parameters.values()
    return [p.name for p in parameters if p.name not in framework and p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]


def _listing(options: Mapping[str, Option]) -> str:
    return ", ".join(options) or "(none)"


def checked_options(kind: str, name: str, cls: type, options: Mapping[str, Any]) -> dict[str, Any]:
    """``options`` for the ``kind`` plugin ``name`` (class ``cls``) as its constructor gets them, or the first
    bad key or value as one-line :class:`ConfigError` naming it and what is valid."""
    where = f"model.{kind}_args"
    owned = FRAMEWORK_KEYS[kind]
    declaration = declared(kind, cls)
    checked: dict[str, Any] = {}
    for key, value in options.items():
        if key in owned:
            raise ConfigError(
                f"{where}.{key} = {value!r}: {key!r} is not an option of {kind} {name!r} but set by "
                f"{owned[key]}; its options: {_listing(declaration or {})}"
            )
        if declaration is None:  # undeclared (a plugin written before declarations): finite numbers at least
            if _number(value) and not math.isfinite(value):
                raise ConfigError(f"{where}.{key} = {value!r} for {kind} {name!r}: must be a finite number")
            checked[key] = value
            continue
        if key not in declaration:
            raise ConfigError(
                f"{where} has {key!r}, not an option of {kind} {name!r}; its options: {_listing(declaration)}"
            )
        option = declaration[key]
        if not option.valid(value):
            raise ConfigError(f"{where}.{key} = {value!r} for {kind} {name!r}: must be {option.describe()}")
        checked[key] = option.value(value)
    return checked


def declaration_problems(kind: str, cls: type) -> list[str]:
    """What is wrong with ``cls``'s declaration: constructor keywords it does not declare (or declared options
    the constructor does not take), options that are not :class:`Option`, defaults outside their own range."""
    options = getattr(cls, "options", None)
    keywords = own_keywords(kind, cls)
    if options is None:
        return [f"its constructor takes {', '.join(keywords)} but it declares no `options`"] if keywords else []
    if not isinstance(options, Mapping):
        return [f"`options` must be a mapping of name to Option, got {type(options).__name__}"]
    problems = [
        f"option {key!r} is not declared with an Option" for key, o in options.items() if not isinstance(o, Option)
    ]
    problems += [
        f"its constructor takes {key!r}, which `options` does not declare" for key in keywords if key not in options
    ]
    problems += [
        f"`options` declares {key!r}, which its constructor does not take" for key in options if key not in keywords
    ]
    parameters = inspect.signature(cls).parameters
    for key, option in options.items():
        default = parameters[key].default if key in parameters else inspect.Parameter.empty
        if isinstance(option, Option) and default is not inspect.Parameter.empty and not option.valid(default):
            problems.append(f"option {key!r}'s default {default!r} is not {option.describe()}")
    return problems
