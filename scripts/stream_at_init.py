"""The residual stream's size at initialisation, per variant (and scale) of a suite, as a Markdown table.

    python scripts/stream_at_init.py experiments/suites/placements_mechanism.yaml

Builds each variant's model exactly as its fits do (the suite's base config, then common, scale and variant
overrides of ``model.config``), at initialisation under three seeds, and prints the embedding's RMS, the first
sublayer's update, the final stream and the embedding's share of the final stream's power
(andrea_lab.inside.stream_scale). Nothing is trained or written.
"""

from __future__ import annotations

import argparse
import sys

from andrea_lab.experiments.sweep.suite import load_suite
from andrea_lab.inside.stream_scale import load_base, model_config_of, stream_scale_at_init


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", help="a suite file (experiments/suites/*.yaml)")
    parser.add_argument("--seeds", default="0,1,2", help="initialisation seeds to average over (default 0,1,2)")
    args = parser.parse_args(argv)
    suite = load_suite(args.suite)
    base = load_base(suite.base)
    seeds = tuple(int(s) for s in args.seeds.split(","))
    print(f"{suite.name}: the stream at initialisation, mean over seeds {', '.join(map(str, seeds))}")
    print()
    print(
        "| scale | variant | embedding RMS | first update RMS | final stream RMS | embedding's share of final power |"
    )
    print("|---|---|---|---|---|---|")
    for scale in suite.scales or (None,):
        for variant in suite.variants:
            config = model_config_of(base, suite.common, scale and scale.overrides, variant.overrides)
            s = stream_scale_at_init(config, seeds)
            name = scale.name if scale else "-"
            print(
                f"| {name} | {variant.name} | {s.embedding_rms:.3f} | {s.first_update_rms:.3f} | "
                f"{s.final_rms:.3f} | {s.embedding_power_share:.3f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
