"""``andrea`` starts in about a second: the dispatcher (``andrea --help``, ``--version``) imports none of the heavy
libraries, and no command's ``--help`` imports Lightning (about 5 s on 2 cores; only a fit, and the work of
``generate``, need it). Checked by what is in ``sys.modules`` of a fresh interpreter, never by a clock."""

from __future__ import annotations

import json
import subprocess
import sys

from andrea_lab.cli import OWN_COMMANDS

HEAVY = ("torch", "lightning", "pandas", "scipy", "matplotlib")

PROBE = f"""
import contextlib, io, json, sys
from andrea_lab.cli import main
heavy = {HEAVY!r}
loaded = lambda: [name for name in heavy if name in sys.modules]
with contextlib.redirect_stdout(io.StringIO()):
    main(["--help"]), main(["--version"])
found = {{"dispatcher": loaded()}}
for command in sys.argv[1:]:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
        main([command, "--help"])
    found[command] = loaded()
print(json.dumps(found))
"""


def imported_by(*commands: str) -> dict[str, list[str]]:
    """The heavy modules loaded after the dispatcher's help, then after each command's ``--help`` in turn."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *commands], capture_output=True, text=True, timeout=300, check=True
    )
    return json.loads(done.stdout.splitlines()[-1])


def test_the_dispatcher_and_every_commands_help_start_without_lightning():
    found = imported_by(*OWN_COMMANDS)
    assert found["dispatcher"] == [], f"`andrea --help` imports {found['dispatcher']}: defer them to the command"
    first = next((command for command in OWN_COMMANDS if "lightning" in found[command]), None)
    assert first is None, f"`andrea {first} --help` imports Lightning: import it where the command's work needs it"


def test_a_command_with_a_parser_apart_answers_help_without_any_heavy_library():
    """``andrea compare``'s parser lives in commands/compare_args.py, which the dispatcher reads for --help: the
    comparison's pandas, scipy, matplotlib and torch (3-5 s of imports) are not loaded for it."""
    assert imported_by("compare")["compare"] == []
