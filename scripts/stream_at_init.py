"""The residual stream's size at initialisation, per variant (and scale) of a suite, as a Markdown table.

    python scripts/stream_at_init.py experiments/suites/placements_mechanism.yaml

Builds each variant's model exactly as its fits do (its planned fit command, read by the sweep's preflight
parser: the suite's base config, then common, scale and variant overrides), at initialisation under three
seeds, and prints the embedding's RMS, the first sublayer's update, the final stream and the embedding's share
of the final stream's power (andrea_lab.inside.stream_scale). Nothing is trained or written.
"""

from __future__ import annotations

import argparse
import sys

from andrea_lab.errors import run_script
from andrea_lab.experiments.sweep.plan import first_run_per_variant, plan_sweep
from andrea_lab.experiments.sweep.preflight import model_config_of
from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.inside.stream_scale import stream_scale_at_init


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", help="a suite file (experiments/suites/*.yaml)")
    parser.add_argument("--seeds", default="0,1,2", help="initialisation seeds to average over (default 0,1,2)")
    args = parser.parse_args(argv)
    suite = load_suite(args.suite)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    print(f"{suite.name}: the stream at initialisation, mean over seeds {', '.join(map(str, seeds))}")
    print()
    print(
        "| scale | variant | embedding RMS | first update RMS | final stream RMS | embedding's share of final power |"
    )
    print("|---|---|---|---|---|---|")
    planned = plan_sweep(suite, "runs", seeds=suite.seeds[:1])  # planned, not run: nothing is written
    for spec in first_run_per_variant(planned):  # one row per (scale, variant), not per LR
        s = stream_scale_at_init(model_config_of(spec.fit_args), seeds)
        print(
            f"| {spec.scale or '-'} | {spec.variant} | {s.embedding_rms:.3f} | {s.first_update_rms:.3f} | "
            f"{s.final_rms:.3f} | {s.embedding_power_share:.3f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(run_script(main, sys.argv[1:], "stream_at_init"))  # bad input: one line, exit 2
