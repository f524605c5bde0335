"""`andrea plugins`: every installed plugin, by group, with the distribution that provides it — and,
separately, the entry points that are installed but cannot be selected, with the reason.

Exit status 0; with ANDREA_LAB_STRICT_PLUGINS=1, 1 when any plugin is broken (for CI).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from collections import defaultdict

from andrea_lab.contracts import CONTRACT_VERSION
from andrea_lab.registry import KINDS, STRICT_ENV_VAR, PluginInfo, group_name, list_plugins, strict_mode


def _clashes(infos: list[PluginInfo]) -> dict[tuple[str, str], list[PluginInfo]]:
    """Names registered by more than one distribution in the same group (only selectable as dist:name)."""
    by_name: dict[tuple[str, str], list[PluginInfo]] = defaultdict(list)
    for info in infos:
        by_name[(info.kind, info.name)].append(info)
    return {key: found for key, found in by_name.items() if len(found) > 1}


def as_dict(infos: list[PluginInfo]) -> dict:
    """The machine-readable form printed by ``--json``."""
    plugin_fields = ("name", "qualified_name", "distribution", "version", "target", "description", "unavailable")
    return {
        "contract_version": CONTRACT_VERSION,
        "strict": strict_mode(),
        "groups": {group_name(kind): [{field: getattr(info, field) for field in plugin_fields}
                                      for info in infos if info.kind == kind and not info.error]
                   for kind in KINDS},
        "broken": [{"group": info.group, "name": info.name, "distribution": info.distribution,
                    "version": info.version, "target": info.target, "error": info.error}
                   for info in infos if info.error],
        "clashes": [{"group": group_name(kind), "name": name, "distributions": [i.distribution for i in found]}
                    for (kind, name), found in _clashes(infos).items()],
    }


def format_listing(infos: list[PluginInfo]) -> str:
    """The human-readable listing: one table per group, then clashes, then broken plugins."""
    working = [info for info in infos if not info.error]
    rows = {info: (info.name, f"{info.distribution} {info.version}", info.target) for info in working}
    widths = [max([len(header)] + [len(row[i]) for row in rows.values()])
              for i, header in enumerate(("NAME", "PROVIDED BY", "OBJECT"))]

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
        out += [line(rows[info], info.description + (f" [unavailable here: {info.unavailable}]"
                                                     if info.unavailable else "")).rstrip() for info in in_group]
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


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="andrea plugins", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    args = parser.parse_args(argv)
    # Loading a plugin imports its module; whatever that prints must not end up in our output
    # (it would corrupt --json), so it goes to stderr.
    with contextlib.redirect_stdout(sys.stderr):
        infos = list_plugins()
    print(json.dumps(as_dict(infos), indent=2) if args.json else format_listing(infos))
    broken = sum(1 for info in infos if info.error)
    if broken and strict_mode():
        print(f"andrea plugins: error: {broken} broken plugin(s) and {STRICT_ENV_VAR} is set", file=sys.stderr)
        return 1
    if broken and not args.json:
        print(f"({broken} broken plugin(s) ignored; set {STRICT_ENV_VAR}=1 to make that an error)", file=sys.stderr)
    return 0
