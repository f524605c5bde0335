"""The stacked-seeds benchmark runs at toy size and prints both timings and the ratio."""

from benchmarks import stacked_seeds


def test_toy_run_prints_both_ways_and_the_ratio(capsys):
    assert stacked_seeds.main(["--k", "2", "--batch", "2", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "one by one: median" in out and "stacked (vmap): median" in out and "speed-up of stacking:" in out
