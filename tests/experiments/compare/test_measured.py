"""What a claim counted, read from its runs: the failures behind a count, a loss against the plateau."""

from __future__ import annotations

import pandas as pd

from andrea_lab.experiments.compare.claim_spec import Claim
from andrea_lab.experiments.compare.measured import LOSS_VS_PLATEAU, Setup, describe_ours, measured_kind


def counted(failures: dict[tuple[str, float], list[str]]) -> pd.DataFrame:
    """``failures[(variant, lr)]``: each seed's outcome (``trained``, ``stuck``, ``regressed``, ``blew_up``)."""
    rows = []
    for (variant, lr), outcomes in failures.items():
        for seed, outcome in enumerate(outcomes):
            flags = {kind: outcome == kind for kind in ("stuck", "regressed", "blew_up")}
            rows.append({"variant": variant, "lr": lr, "seed": seed, **flags})
    return pd.DataFrame(rows)


RUNS = counted(
    {
        ("a", 1e-3): ["trained"] * 4,
        ("b", 1e-3): ["stuck", "stuck", "stuck", "trained"],
        ("a", 4e-3): ["trained"] * 4,
        ("b", 4e-3): ["blew_up", "trained", "trained", "trained"],
    }
)


def test_a_count_of_any_failure_counted_the_failures_its_runs_had():
    assert measured_kind(Claim("fewer_divergences", "a", "b", lrs=(1e-3, 1e-3)), RUNS) == "stuck"
    assert measured_kind(Claim("fewer_divergences", "a", "b"), RUNS) == "stuck+blew_up"
    assert measured_kind(Claim("fewer_divergences", "a", "b", lrs=(4e-3, 4e-3)), RUNS) == "blew_up"
    nothing = counted({("a", 1e-3): ["trained"], ("b", 1e-3): ["trained"]})
    assert measured_kind(Claim("fewer_divergences", "a", "b"), nothing) == "none failed"
    assert measured_kind(Claim("fewer_blowups", "a", "b"), RUNS) == "blew_up"


def test_a_loss_at_a_fixed_lr_where_a_side_is_mostly_stuck_measures_the_plateau():
    assert measured_kind(Claim("lower_loss", "a", "b", lrs=(1e-3, 1e-3)), RUNS) == LOSS_VS_PLATEAU
    assert measured_kind(Claim("lower_loss", "a", "b", lrs=(4e-3, 4e-3)), RUNS) == "loss"
    assert measured_kind(Claim("lower_loss_trained", "a", "b", lrs=(1e-3, 1e-3)), RUNS) == "loss"
    assert measured_kind(Claim("lower_sensitivity", "a", "b"), RUNS) == "lr_sensitivity"
    assert measured_kind(Claim("higher_ceiling", "a", "b"), RUNS) == "lr_ceiling"


def test_ours_names_size_tokens_and_metric_and_each_side_where_they_differ():
    same = {"a": Setup(300_032, 512_000), "b": Setup(299_904, 512_000)}
    loss = Claim("lower_loss", "a", "b")
    assert describe_ours(loss, same, "held-out loss") == (
        "0.3M non-embedding params, 0.51M tokens, held-out loss, nats/token"
    )
    deeper = {"a": Setup(1_200_000, 512_000), "b": Setup(600_000, 512_000)}
    count = Claim("fewer_stuck", "a", "b")
    assert describe_ours(count, deeper, "held-out loss") == (
        "a 1.2M / b 0.6M non-embedding params, 0.51M tokens, runs counted by outcome (exact McNemar)"
    )
    assert describe_ours(loss, {}, "held-out loss").startswith("model size not counted")
