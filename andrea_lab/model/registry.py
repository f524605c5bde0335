"""Find, load and check plugins from the ``andrea_lab.*`` entry-point groups.

Every variant — including the built-ins, which andrea-lab registers in its own ``pyproject.toml``
exactly as a third party would — is discovered with :mod:`importlib.metadata`. There is no table of
names in the code: installing a distribution that declares an entry point is the only way to add one.

Selecting a plugin by name accepts three forms:

* ``gelu`` — the name registered in the group (an error if two distributions register it);
* ``andrea-lab-example:squared_relu`` — the name as registered by one named distribution,
  which settles a clash between two distributions;
* ``my_module:MyActivation`` — an import path, for a variant that is not packaged yet. Importing a
  module runs its code, so this form is followed only behind an explicit opt-in: the environment
  variable ``ANDREA_LAB_IMPORT_PATHS=1`` (or :func:`allow_import_paths` in a test). A name read from a
  checkpoint is never followed as an import path, opt-in or not (:func:`require_registered`).

A plugin whose import fails never takes the tool down: it is reported by :func:`list_plugins`
(and ``andrea plugins``), and only selecting it fails, with the original exception. Setting the
environment variable ``ANDREA_LAB_STRICT_PLUGINS=1`` turns any broken plugin into an error
everywhere, for CI.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib import metadata

from packaging.utils import canonicalize_name

from andrea_lab.errors import UsageError
from andrea_lab.model.contracts import BACKEND_OPS, CONTRACT_VERSION, Availability, eager_fallbacks
from andrea_lab.model.contracts import GROUP_CONTRACTS as MODEL_CONTRACTS
from andrea_lab.model.import_paths import IMPORT_PATHS_ENV_VAR, env_flag, import_paths_allowed
from andrea_lab.model.training_contracts import TRAINING_CONTRACTS

#: Every entry-point group's contract: the model's kinds (fields of AndreaConfig), then training's (of AndreaLM).
GROUP_CONTRACTS = {**MODEL_CONTRACTS, **TRAINING_CONTRACTS}
KINDS: tuple[str, ...] = tuple(GROUP_CONTRACTS)  # every kind ``andrea plugins`` lists
STRICT_ENV_VAR = "ANDREA_LAB_STRICT_PLUGINS"


class PluginError(UsageError):
    """A plugin could not be selected or used; the message says which, why, and what would be valid."""


class BackendUnavailableError(PluginError, RuntimeError):
    """The selected kernel backend's ``availability()`` says it cannot run here; the message says why."""


class PluginRuntimeError(PluginError):
    """A plugin raised (or returned the wrong shape) while the model was built or first run; the message
    names the plugin, its distribution and the exception, which is kept as ``__cause__``."""


def with_article(noun: str) -> str:
    """'an activation', 'a norm_placement', 'a residual stream': a noun (a kind) with its article."""
    return f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}"


def group_name(kind: str) -> str:
    if kind not in GROUP_CONTRACTS:
        raise PluginError(f"unknown plugin kind {kind!r}; valid kinds: {', '.join(KINDS)}")
    return f"andrea_lab.{kind}"


def strict_mode() -> bool:
    return env_flag(STRICT_ENV_VAR)


class UnregisteredPluginError(PluginError):
    """A plugin name that is not a registered entry point, where only registered ones may be selected."""


@dataclass(frozen=True)
class PluginInfo:
    """One registered entry point, loaded or not, as ``andrea plugins`` shows it."""

    kind: str
    name: str
    target: str  # the "module:attr" the entry point points to
    distribution: str
    version: str
    description: str = ""
    error: str | None = None  # why loading or checking it failed
    unavailable: str | None = None  # a kernel backend that loads but cannot run here: its reason
    #: A kernel backend's ops that are the eager reference, not its own (none for the reference itself).
    eager_fallback: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        return group_name(self.kind)

    @property
    def qualified_name(self) -> str:
        return f"{self.distribution}:{self.name}"


@cache
def _entry_points(kind: str) -> tuple[metadata.EntryPoint, ...]:
    """The group's entry points, sorted; scanned once until :func:`clear_cache` (a scan reads every
    installed distribution's metadata)."""
    return tuple(sorted(metadata.entry_points(group=group_name(kind)), key=lambda ep: (ep.name, _dist_name(ep))))


def _dist_name(ep: metadata.EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else "<unknown distribution>"


def _dist_version(ep: metadata.EntryPoint) -> str:
    return ep.dist.version if ep.dist is not None else "?"


def registered_names(kind: str) -> list[str]:
    """The names installed in a group, sorted, each once (whether or not it loads)."""
    return sorted({ep.name for ep in _entry_points(kind)})


def _describe(obj: object) -> str:
    """The plugin's own one-line description: its class's ``description``, else the first line of its
    class's own docstring. Neither is inherited, so a subclass of a base never shows the base's text."""
    own = vars(obj) if inspect.isclass(obj) else {}
    text = own.get("description") or inspect.cleandoc(own.get("__doc__") or "")
    text = text if isinstance(text, str) else ""
    return text.strip().splitlines()[0] if text.strip() else ""


def _check_contract(kind: str, obj: object, label: str) -> None:
    """Refuse an object that does not implement the contract of its group, saying what is missing."""
    contract = GROUP_CONTRACTS[kind]
    base = contract.base
    if not inspect.isclass(obj):
        raise PluginError(
            f"{label} is not a class (got {type(obj).__name__}); "
            f"{with_article(kind)} plugin must be a class implementing {base.__module__}.{base.__name__}"
        )
    missing = [attr for attr in contract.required if not hasattr(obj, attr)]
    if missing:
        raise PluginError(
            f"{label} does not satisfy the {kind} contract: missing {', '.join(missing)} "
            f"(subclass {base.__module__}.{base.__name__} to inherit them)"
        )
    version = obj.contract_version
    if version != CONTRACT_VERSION:
        raise PluginError(
            f"{label} was written for plugin contract version {version}, but this andrea-lab "
            f"provides contract version {CONTRACT_VERSION}; upgrade the plugin or andrea-lab"
        )
    try:
        inspect.signature(obj).bind(*contract.probe_args, **dict(contract.probe_kwargs))
    except TypeError as exc:
        raise PluginError(
            f"{label} has the wrong constructor signature for {with_article(kind)} plugin: "
            f"{exc}; expected {contract.constructor}"
        ) from None
    if kind == "kernel_backend":
        check = inspect.getattr_static(obj, "availability")
        if not callable(obj.availability):
            raise PluginError(
                f"{label} has no callable availability() check; a kernel backend must say whether it can run here"
            )
        if not isinstance(check, (classmethod, staticmethod)):
            raise PluginError(
                f"{label}: availability() must be a @classmethod (it is asked before any "
                f"instance exists), got {type(check).__name__} {check!r}"
            )


def _load_entry_point(kind: str, ep: metadata.EntryPoint) -> type:
    label = f"{kind} plugin {ep.name!r} ({ep.value}) from {_dist_name(ep)} {_dist_version(ep)}"
    try:
        obj = ep.load()
    except Exception as exc:  # a plugin's import may raise anything; report it, never crash
        raise PluginError(f"{label} failed to load: {type(exc).__name__}: {exc}") from exc
    _check_contract(kind, obj, label)
    return obj


class _NotImportable(PluginError):
    """An import path whose module or attribute does not exist (as opposed to a module that fails)."""


def _load_import_path(kind: str, spec: str) -> type:
    module_name, _, attr = spec.partition(":")
    label = f"{kind} plugin {spec!r}"

    def not_importable(exc: Exception) -> _NotImportable:
        return _NotImportable(
            f"{label}: cannot import it ({type(exc).__name__}: {exc}); an import path "
            f"must be 'module:Attribute' on the Python path"
        )

    try:
        obj = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (module_name == exc.name or module_name.startswith(exc.name + ".")):
            raise not_importable(exc) from exc
        raise PluginError(f"{label} failed to import: {type(exc).__name__}: {exc}") from exc
    except Exception as exc:  # the module exists but its import raises: report it like a broken entry point
        raise PluginError(f"{label} failed to import: {type(exc).__name__}: {exc}") from exc
    try:
        for part in attr.split("."):
            obj = getattr(obj, part)
    except AttributeError as exc:
        raise not_importable(exc) from exc
    _check_contract(kind, obj, label)
    return obj


def _matching_entry_points(kind: str, name: str) -> tuple[list[metadata.EntryPoint], str | None]:
    """Entry points a name selects, and the distribution it was qualified with (if any)."""
    eps = _entry_points(kind)
    if ":" in name:
        dist, _, plain = name.partition(":")
        wanted = canonicalize_name(dist)
        chosen = [ep for ep in eps if ep.name == plain and canonicalize_name(_dist_name(ep)) == wanted]
        return chosen, dist
    return [ep for ep in eps if ep.name == name], None


def selected_entry_point(kind: str, name: str) -> metadata.EntryPoint | None:
    """The one entry point that ``name`` (``gelu`` or ``andrea-lab:gelu``) selects, without loading it;
    None for an import path, an unknown name, or a bare name that several distributions register."""
    matches, _ = _matching_entry_points(kind, name)
    return matches[0] if len(matches) == 1 else None


def same_plugin(kind: str, a: str, b: str) -> bool:
    """Whether two names select the same entry point (``pre`` and ``andrea-lab:pre``), without loading it."""
    first, second = selected_entry_point(kind, a), selected_entry_point(kind, b)
    return (
        first is not None
        and second is not None
        and (first.value, first.dist and first.dist.name) == (second.value, second.dist and second.dist.name)
    )


def _warn_or_raise_broken(kind: str, selected: metadata.EntryPoint) -> None:
    """Warn about (strict mode: refuse) the broken plugins of a group, except the one being selected,
    whose own error is raised when it is loaded."""
    broken = [
        info
        for info in list_plugins(kind, availability=False)
        if info.error and (info.name, info.distribution) != (selected.name, _dist_name(selected))
    ]
    if not broken:
        return
    text = "; ".join(f"{info.qualified_name}: {info.error}" for info in broken)
    if strict_mode():
        raise PluginError(f"broken {kind} plugins ({STRICT_ENV_VAR} is set): {text}")
    warnings.warn(f"ignoring broken {kind} plugins: {text}", RuntimeWarning, stacklevel=3)


def resolve(kind: str, name: str) -> type:
    """Return the plugin class that ``name`` selects in group ``andrea_lab.<kind>``.

    Raises :class:`PluginError` with the installed names when nothing matches, both
    distributions when two match, the original exception when it fails to import, and what
    is missing when it does not satisfy the contract. An import path is refused (before anything is
    imported) unless :func:`import_paths_allowed`.
    """
    if (
        isinstance(name, str)
        and ":" in name
        and not import_paths_allowed()
        and not _matching_entry_points(kind, name)[0]
    ):
        dist, _, plain = name.partition(":")
        if _is_distribution(dist):
            raise UnregisteredPluginError(
                f"distribution {dist!r} registers no {kind} named {plain!r}; {_suggestion(kind, name)}installed in "
                f"{group_name(kind)}: {', '.join(_qualified(kind)) or '(none)'}"
            )
        raise UnregisteredPluginError(
            f"{kind} {name!r} is not a registered plugin; an import path 'module:Class' runs that module's code, "
            f"so it is only followed with {IMPORT_PATHS_ENV_VAR}=1 (docs/plugins.md). "
            f"{_suggestion(kind, name)}installed in {group_name(kind)}: {_choices(kind)}"
        )
    return _resolve(kind, name)


def require_registered(plugins: Mapping[str, object], source: str) -> None:
    """Refuse, before anything is imported, a plugin name that selects no registered entry point.

    For names read from a file someone may have handed over (a checkpoint's hyperparameters): such a
    file chooses among the installed plugins, never a module to import, whatever the opt-in says. Every
    kind is checked, the model's and training's (an optimizer or schedule import path would run its module
    as surely as an activation's): ``plugins`` maps kinds to names."""
    for kind in KINDS:
        name = plugins.get(kind)
        if name is None:
            continue
        if not isinstance(name, str) or selected_entry_point(kind, name) is None:
            raise UnregisteredPluginError(
                f"{source} names {kind} {name!r}, which selects no registered plugin; a checkpoint may only "
                f"name installed entry-point plugins (never an import path). Installed in {group_name(kind)}: "
                f"{_choices(kind)}"
            )


@cache
def _resolve(kind: str, name: str) -> type:
    group = group_name(kind)
    if not isinstance(name, str) or not name.strip():
        raise PluginError(
            f"{kind} must be a non-empty name; installed in {group}: {', '.join(registered_names(kind)) or '(none)'}"
        )
    matches, dist = _matching_entry_points(kind, name)
    if len(matches) > 1:
        sources = " and ".join(f"{_dist_name(ep)} {_dist_version(ep)} ({ep.value})" for ep in matches)
        raise PluginError(
            f"{kind} {name!r} is registered by more than one distribution: {sources}; "
            f"select one explicitly, e.g. '{_dist_name(matches[0])}:{name}'"
        )
    if matches:
        _warn_or_raise_broken(kind, matches[0])
        return _load_entry_point(kind, matches[0])
    if ":" in name and dist is not None and "." not in name.partition(":")[2] and _is_distribution(dist):
        # Not registered by that distribution; it may still be an import path into a module named like
        # the distribution (distribution my-plugin, package my_plugin), so try that before refusing.
        try:
            return _load_import_path(kind, name)
        except _NotImportable:
            raise PluginError(
                f"distribution {dist!r} registers no {kind} named {name.partition(':')[2]!r}; "
                f"{_suggestion(kind, name)}installed in {group}: "
                f"{', '.join(_qualified(kind)) or '(none)'}"
            ) from None
    if ":" in name:
        return _load_import_path(kind, name)
    raise PluginError(
        f"unknown {kind} {name!r}; {_suggestion(kind, name)}installed in {group}: "
        f"{_choices(kind)} (or an import path 'module:Class' with {IMPORT_PATHS_ENV_VAR}=1)"
    )


def suggest(name: str, candidates: list[str]) -> str:
    """ "did you mean 'gelu'? " for a name close to one of ``candidates``, else ""."""
    close = difflib.get_close_matches(name, candidates, n=2, cutoff=0.6)
    return f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""


def _suggestion(kind: str, name: str) -> str:
    return suggest(name, registered_names(kind) + _qualified(kind))


def _choices(kind: str) -> str:
    """The installed names of a group, the ones that fail to load listed apart."""
    infos = list_plugins(kind, availability=False)
    working = sorted({info.name for info in infos if not info.error})
    broken = sorted({info.qualified_name for info in infos if info.error})
    text = ", ".join(working) or "(none)"
    return text + (f"; broken, see `andrea plugins`: {', '.join(broken)}" if broken else "")


def _is_distribution(name: str) -> bool:
    try:
        metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return False
    return True


def _qualified(kind: str) -> list[str]:
    return [f"{_dist_name(ep)}:{ep.name}" for ep in _entry_points(kind)]


def list_plugins(kind: str | None = None, availability: bool = True) -> list[PluginInfo]:
    """Every registered entry point (of one kind, or all), each loaded and checked; failures kept.

    With ``availability``, each kernel backend's ``availability()`` is called too (an exception makes
    it broken, a "no" fills ``unavailable``); selecting a plugin skips that, since a backend's check
    may be slow (the CUDA backend compiles its kernels on the first call).
    """
    infos = []
    for k in [kind] if kind else KINDS:
        for ep in _entry_points(k):
            description, error, unavailable, eager = "", None, None, ()
            try:
                obj = _load_entry_point(k, ep)
                description = _describe(obj)
                if k == "kernel_backend":
                    eager = tuple(eager_fallbacks(obj))
                    eager = () if len(eager) == len(BACKEND_OPS) else eager  # the reference itself
                if k == "kernel_backend" and availability:
                    availability = check_availability(obj, f"{k} plugin {ep.name!r} from {_dist_name(ep)}")
                    unavailable = None if availability else availability.reason or "(no reason given)"
            except PluginError as exc:
                error = str(exc)
            infos.append(
                PluginInfo(
                    k, ep.name, ep.value, _dist_name(ep), _dist_version(ep), description, error, unavailable, eager
                )
            )
    return infos


def describe_selection(kind: str, name: str) -> str:
    """How a message names the plugin ``name`` selects: with its distribution, version and target."""
    ep = selected_entry_point(kind, name)
    if ep is None:
        return f"{kind} plugin {name!r}"
    return f"{kind} plugin {name!r} from {_dist_name(ep)} {_dist_version(ep)} ({ep.value})"


def check_availability(backend: type, label: str) -> Availability:
    """Call a kernel backend's ``availability()``; an exception or a result that is not an
    :class:`Availability` (or a bool) becomes a :class:`PluginRuntimeError` naming ``label``."""
    try:
        result = backend.availability()
    except Exception as exc:  # a plugin's check may raise anything; say whose it was
        raise PluginRuntimeError(f"{label}: availability() raised {type(exc).__name__}: {exc}") from exc
    if isinstance(result, bool):
        return Availability(result, "" if result else "availability() returned False without a reason")
    if not isinstance(result, Availability):
        raise PluginRuntimeError(
            f"{label}: availability() returned {result!r}; it must return "
            f"andrea_lab.model.contracts.Availability(available, reason)"
        )
    return result


resolve.cache_info = _resolve.cache_info  # type: ignore[attr-defined]
resolve.cache_clear = _resolve.cache_clear  # type: ignore[attr-defined]


def clear_cache() -> None:
    """Forget discovered and resolved plugins (after installing or removing a distribution in-process)."""
    _resolve.cache_clear()
    _entry_points.cache_clear()
