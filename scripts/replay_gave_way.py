"""Which signal gave way first, per variant, as recorded and as today's band rule judges the same events.

    python scripts/replay_gave_way.py runs/instability/d64

Reads every run under the directory (``<variant>/<run>/``), replays its probe signals from the event files
(andrea_lab.experiments.compare.gave_way_replay), checks that the replay under the rule the runs were recorded
with (only log Z linear) reproduces every record, and prints, per variant and event kind, how often each
signal (by metric) was first: recorded, and replayed with today's rule. Runs are read, never written.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

from andrea_lab.errors import run_script
from andrea_lab.experiments.compare.gave_way_replay import replay_run
from andrea_lab.fit.stability.precursors import log_z

#: The linear signals before 2026-12-04 (only log Z): the rule the committed instability runs were recorded with.
RECORDED_RULE = (log_z.name,)


def metric(signal: str | None) -> str:
    return "none" if signal is None else signal.split("/", 1)[0]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a directory of <variant>/<run>/ (e.g. runs/instability/d64)")
    root = parser.parse_args(argv).runs
    runs = sorted(p for p in root.glob("*/*") if (p / "summary.json").is_file() and ".interrupted-" not in p.name)
    if not runs:
        print(f"no finished runs under {root}", file=sys.stderr)
        return 2
    recorded, today, reproduced, total = Counter(), Counter(), 0, 0
    for run in runs:
        variant = run.parent.name
        records, old = replay_run(run, linear=RECORDED_RULE)
        _, new = replay_run(run)
        old_by, new_by = {(r.event, r.step): r for r in old}, {(r.event, r.step): r for r in new}
        for item in records:
            key = (item["event"], item["step"])
            total += 1
            reproduced += old_by[key].signal == item["signal"] and old_by[key].left_band_at == item["left_band_at"]
            recorded[(variant, item["event"], metric(item["signal"]))] += 1
            today[(variant, item["event"], metric(new_by[key].signal))] += 1
    print(f"{len(runs)} runs, {total} records; replayed under the recorded rule: {reproduced}/{total} identical")
    print()
    print("| variant | event | first signal | recorded | today's rule |")
    print("|---|---|---|---|---|")
    for key in sorted(set(recorded) | set(today)):
        print(f"| {key[0]} | {key[1]} | {key[2]} | {recorded[key]} | {today[key]} |")
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main, sys.argv[1:], "replay_gave_way"))  # bad input: one line, exit 2
