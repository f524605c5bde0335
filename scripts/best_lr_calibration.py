"""How often does each best-LR method call a difference between two *identical* variants? A simulation.

    python scripts/best_lr_calibration.py                 # the table docs/experiments.md quotes
    python scripts/best_lr_calibration.py --repetitions 500 --seeds 5

The resampled A/A of ``andrea compare`` (andrea_lab/experiments/compare/aa_calibration.py) measures this on real runs,
but one A/A suite is one realisation, and its splits share runs. Here every repetition draws fresh runs:
both variants have the same true loss-vs-LR curve, each run adds a per-seed offset shared by all LRs
(init and data order) and independent noise per (seed, LR). The methods are the ones the comparison
offers (the same functions): the best LR chosen in-sample, chosen for each seed on the other seeds
(leave-one-seed-out, the default), and no selection (both at one LR). A false positive is a paired-t 95 %
interval that excludes 0; nominal 5 %.
"""

from __future__ import annotations

import argparse

import numpy as np

from andrea_lab.experiments.compare.aa_calibration import _held_out_picks, _rejects

#: True loss above the optimum per LR step of a 6-point grid (the offsets only matter relative to the noise).
CURVES = {
    "flat optimum (two LRs equal)": np.array([0.30, 0.15, 0.0, 0.0, 0.15, 0.30]),
    "sharp optimum": np.array([0.30, 0.15, 0.05, 0.0, 0.05, 0.30]),
    "cliff after the optimum": np.array([0.30, 0.15, 0.05, 0.0, 0.02, 0.90]),
}


def false_positive_rates(
    curve: np.ndarray, seeds: int, repetitions: int, seed_sd: float, noise_sd: float, rng: np.random.Generator
) -> dict[str, float]:
    """The share of repetitions in which each method's interval excludes 0."""
    shape = (repetitions, seeds, len(curve))
    a = curve + rng.normal(0, seed_sd, shape[:2] + (1,)) + rng.normal(0, noise_sd, shape)
    b = curve + rng.normal(0, seed_sd, shape[:2] + (1,)) + rng.normal(0, noise_sd, shape)
    rows, seeds_index = np.arange(repetitions)[:, None], np.arange(seeds)[None, :]
    best_a, best_b = a.mean(axis=1).argmin(axis=1), b.mean(axis=1).argmin(axis=1)
    in_sample = a[rows, seeds_index, best_a[:, None]] - b[rows, seeds_index, best_b[:, None]]
    picks_a = np.stack([_held_out_picks(x) for x in a])
    picks_b = np.stack([_held_out_picks(x) for x in b])
    cross_fitted = a[rows, seeds_index, picks_a] - b[rows, seeds_index, picks_b]
    optimum = int(curve.argmin())
    same_lr = a[:, :, optimum] - b[:, :, optimum]
    return {
        name: float(_rejects(d).mean())
        for name, d in (("in-sample", in_sample), ("leave-one-seed-out", cross_fitted), ("same LR", same_lr))
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 10])
    parser.add_argument("--repetitions", type=int, default=4000)
    parser.add_argument("--seed-sd", type=float, default=0.02, help="per-seed offset shared by all LRs (nats)")
    parser.add_argument("--noise-sd", type=float, default=0.03, help="independent noise per (seed, LR) (nats)")
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    print(
        f"{args.repetitions} A/A repetitions per row; per-seed offset sd {args.seed_sd}, noise sd {args.noise_sd}; "
        "false-positive rate at nominal 5 %:\n"
    )
    print("| true curve | seeds | in-sample best LR | leave-one-seed-out | same LR (no selection) |")
    print("|---|---|---|---|---|")
    for label, curve in CURVES.items():
        for seeds in args.seeds:
            rates = false_positive_rates(curve, seeds, args.repetitions, args.seed_sd, args.noise_sd, rng)
            print(
                f"| {label} | {seeds} | "
                + " | ".join(f"{rate:.1%}".replace("%", " %") for rate in rates.values())
                + " |"
            )


if __name__ == "__main__":
    main()
