"""`andrea plugins`: every installed plugin, by group, with the distribution that provides it — and,
separately, the entry points that are installed but cannot be selected, with the reason.

`andrea plugins --check [NAME ...]` runs each plugin (all installed ones, or those named: `gelu`,
`andrea-lab:gelu`): alone on small tensors, then in a micro model alone and with each built-in of the
other kinds, forward and backward; it prints a verdict per plugin (PASS, FAIL with the reason, or
UNAVAILABLE with the backend's own reason).

Exit status 0; 1 when a checked plugin fails, or (ANDREA_LAB_STRICT_PLUGINS=1) when any plugin is broken.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import defaultdict
from typing import TYPE_CHECKING

from packaging.utils import canonicalize_name

from andrea_lab.model.contracts import CONTRACT_VERSION
from andrea_lab.model.registry import (
    KINDS,
    STRICT_ENV_VAR,
    PluginError,
    PluginInfo,
    group_name,
    list_plugins,
    strict_mode,
    suggest,
)

if TYPE_CHECKING:
    from andrea_lab.model.plugin_check import Verdict


def _clashes(infos: list[PluginInfo]) -> dict[tuple[str, str], list[PluginInfo]]:
    """Names registered by more than one distribution in the same group (only selectable as dist:name)."""
    by_name: dict[tuple[str, str], list[PluginInfo]] = defaultdict(list)
    for info in infos:
        by_name[(info.kind, info.name)].append(info)
    return {key: found for key, found in by_name.items() if len(found) > 1}


def as_dict(infos: list[PluginInfo]) -> dict:
    """The machine-readable form printed by ``--json``."""
    plugin_fields = (
        "name",
        "qualified_name",
        "distribution",
        "version",
        "target",
        "description",
        "unavailable",
        "eager_fallback",
    )
    return {
        "contract_version": CONTRACT_VERSION,
        "strict": strict_mode(),
        "groups": {
            group_name(kind): [
                {field: getattr(info, field) for field in plugin_fields}
                for info in infos
                if info.kind == kind and not info.error
            ]
            for kind in KINDS
        },
        "broken": [
            {
                "group": info.group,
                "name": info.name,
                "distribution": info.distribution,
                "version": info.version,
                "target": info.target,
                "error": info.error,
            }
            for info in infos
            if info.error
        ],
        "clashes": [
            {"group": group_name(kind), "name": name, "distributions": [i.distribution for i in found]}
            for (kind, name), found in _clashes(infos).items()
        ],
    }


def format_listing(infos: list[PluginInfo]) -> str:
    """The human-readable listing: one table per group, then clashes, then broken plugins."""
    working = [info for info in infos if not info.error]
    rows = {info: (info.name, f"{info.distribution} {info.version}", info.target) for info in working}
    widths = [
        max([len(header)] + [len(row[i]) for row in rows.values()])
        for i, header in enumerate(("NAME", "PROVIDED BY", "OBJECT"))
    ]

    def line(cells: tuple[str, ...], description: str) -> str:
        return "  " + "  ".join(cell.ljust(width) for cell, width in zip(cells, widths)) + "  " + description

    out = [f"plugin contract version {CONTRACT_VERSION}"]
    for kind in KINDS:
        out += ["", group_name(kind)]
        in_group = [info for info in working if info.kind == kind]
        if not in_group:
            out.append("  (none installed)")
            continue
        out.append(line(("NAME", "PROVIDED BY", "OBJECT"), "DESCRIPTION"))
        out += [line(rows[info], _notes(info)).rstrip() for info in in_group]
    clashes = _clashes(infos)
    if clashes:
        out += ["", "Names registered by more than one distribution (select one as 'distribution:name'):"]
        for (kind, name), found in clashes.items():
            choices = " or ".join(f"'{info.qualified_name}'" for info in found)
            out.append(f"  {group_name(kind)} {name}: {choices}")
    broken = [info for info in infos if info.error]
    if broken:
        out += ["", f"Broken plugins ({len(broken)}; installed, but selecting them fails):"]
        for info in broken:
            out.append(f"  {info.group} {info.name}  from {info.distribution} {info.version} ({info.target})")
            out.append(f"    {info.error}")
    return "\n".join(out)


def _notes(info: PluginInfo) -> str:
    """The description, then what the listing must not hide: a backend's eager fallbacks, unavailability."""
    text = info.description
    if info.eager_fallback:
        text += f" [no native {', '.join(info.eager_fallback)}: eager fallback]"
    if info.unavailable:
        text += f" [unavailable here: {info.unavailable}]"
    return text


def select(infos: list[PluginInfo], names: list[str]) -> list[PluginInfo]:
    """The plugins ``names`` designate (``gelu`` in every group and distribution, ``andrea-lab:gelu``)."""
    chosen = []
    for name in names:
        found = [
            info
            for info in infos
            if name in (info.name, info.qualified_name)
            or (
                ":" in name
                and canonicalize_name(name.partition(":")[0]) == canonicalize_name(info.distribution)
                and name.partition(":")[2] == info.name
            )
        ]
        if not found:
            plain = sorted({info.name for info in infos})
            known = plain + sorted({info.qualified_name for info in infos})
            raise PluginError(
                f"no installed plugin is named {name!r}; {suggest(name, known)}installed: "
                f"{', '.join(plain)} (or distribution:name)"
            )
        chosen += [info for info in found if info not in chosen]
    return chosen


def format_verdict(verdict: Verdict) -> str:
    info = verdict.info
    head = f"{verdict.status:<11} {info.group} {info.name}  ({info.distribution} {info.version})"
    details = (
        verdict.passed
        + ([f"failed: {verdict.failure}"] if verdict.failure else [])
        + ([f"not available here: {verdict.unavailable}"] if verdict.unavailable else [])
    )
    return "\n".join([head] + [f"    {line}" for line in details])


def run_checks(infos: list[PluginInfo], names: list[str]) -> int:
    from andrea_lab.model.plugin_check import check_plugin  # builds models: `andrea plugins` lists without it

    verdicts = [check_plugin(info) for info in (select(infos, names) if names else infos)]
    for verdict in verdicts:
        print(format_verdict(verdict))
    counts = {status: sum(v.status == status for v in verdicts) for status in ("PASS", "FAIL", "UNAVAILABLE")}
    print(f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['UNAVAILABLE']} not available here")
    return 1 if counts["FAIL"] else 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="andrea plugins", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.add_argument(
        "--check",
        nargs="*",
        metavar="NAME",
        default=None,
        help="run the behaviour checks on every installed plugin, or on those named",
    )
    args = parser.parse_args(argv)
    # Loading a plugin imports its module; whatever that prints must not end up in our output
    # (it would corrupt --json), so it goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        infos = list_plugins()
    if args.check is not None:
        return run_checks(infos, args.check)
    print(json.dumps(as_dict(infos), indent=2) if args.json else format_listing(infos))
    broken = sum(1 for info in infos if info.error)
    if broken and strict_mode():
        print(f"andrea plugins: error: {broken} broken plugin(s) and {STRICT_ENV_VAR} is set", file=sys.stderr)
        return 1
    if broken and not args.json:
        print(f"({broken} broken plugin(s) ignored; set {STRICT_ENV_VAR}=1 to make that an error)", file=sys.stderr)
    return 0
