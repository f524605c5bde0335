"""The sweep benchmark's rungs and its side-by-side table (benchmarks/sweep_rungs.py), on constructed totals."""

from __future__ import annotations

import pandas as pd
import pytest

from benchmarks import sweep_rungs


def test_the_rungs_are_the_base_the_ladders_scales_and_d512():
    assert sweep_rungs.rung_overrides("cpu-base") == {}
    d256 = sweep_rungs.rung_overrides("d256")
    assert d256["model.config.d_model"] == 256 and d256["data.batch_size"] == 64
    assert "trainer.max_steps" not in d256  # the benchmark's --steps decides
    d512 = sweep_rungs.rung_overrides("d512")
    assert d512["model.config.d_model"] == 512 and d512["model.config.d_model"] // d512["model.config.n_head"] == 32
    with pytest.raises(SystemExit, match=r"--rungs: 'd1024' is not a rung; rungs: cpu-base, d64, .*d256, d512"):
        sweep_rungs.rung_overrides("d1024")


def _runs(path: str, step_s: list[float], steps: int = 10) -> list[dict]:
    return [{"path": path, "steps": s * steps, "step_count": steps} for s in step_s]


def test_step_times_leave_out_each_paths_first_fit_where_asked():
    runs = pd.DataFrame(_runs("today", [2.0, 2.0]) + _runs("fastest", [9.0, 1.0, 1.0]) + _runs("lone", [3.0]))
    totals = runs.groupby("path", sort=False)[["steps"]].sum()
    sweep_rungs.add_step_times(totals, runs)
    assert totals.loc["today", "step_s"] == pytest.approx(2.0)
    assert totals.loc["fastest", "step_s"] == pytest.approx(11.0 / 3)  # the cold compile is in the first fit
    assert totals.loc["fastest", "step_s_from_2nd"] == pytest.approx(1.0)
    assert pd.isna(totals.loc["lone", "step_s_from_2nd"])


def test_side_by_side_gives_every_rung_and_path_against_today_and_the_matmul_ratio():
    def totals(today_step: float, fast_step: float) -> pd.DataFrame:
        frame = pd.DataFrame(
            {
                "runs_per_hour": [10.0, 18.0],
                "steps_share": [0.6, 0.7],
                "heldout_share": [0.13, 0.1],
                "step_s": [today_step, fast_step + 0.5],
                "step_s_from_2nd": [today_step, fast_step],
            },
            index=pd.Index(["today", "fastest"], name="path"),
        )
        return frame

    table = sweep_rungs.side_by_side({"cpu-base": totals(1.0, 1.0), "d512": totals(4.0, 2.0)}, matmul=2.5)
    assert list(table.index) == [("cpu-base", "today"), ("cpu-base", "fastest"), ("d512", "today"), ("d512", "fastest")]
    assert table.loc[("d512", "fastest"), "vs_today"] == pytest.approx(1.8)
    assert table.loc[("d512", "fastest"), "step_speedup_from_2nd"] == pytest.approx(2.0)
    assert table.loc[("d512", "fastest"), "of_matmul_ratio"] == pytest.approx(0.8)
    assert table.loc[("d512", "today"), "step_speedup_from_2nd"] == pytest.approx(1.0)
    assert table.loc[("cpu-base", "today"), "of_matmul_ratio"] == pytest.approx(0.4)
    one_fit = totals(4.0, 2.0)
    one_fit.loc["fastest", "step_s_from_2nd"] = float("nan")  # one fit: its step over every fit
    assert sweep_rungs.side_by_side({"d512": one_fit}, 2.5).loc[("d512", "fastest"), "step_speedup_from_2nd"] == 1.6


def test_the_matmul_ratio_is_the_median_of_paired_measurements(monkeypatch):
    rates = iter([200.0, 100.0, 900.0, 100.0, 300.0, 100.0])  # bf16, fp32 alternately: ratios 2, 9, 3
    monkeypatch.setattr(sweep_rungs, "square_matmul", lambda width, dtype, reps: next(rates))
    assert sweep_rungs.matmul_ratio(rounds=3) == 3.0
    assert sweep_rungs.matmul_ratio.__defaults__ == (512, 5, 5, None)


def test_the_matmul_ratio_is_measured_not_assumed_at_the_fits_threads_and_leaves_torchs_alone():
    before = sweep_rungs.torch.get_num_threads()
    assert sweep_rungs.matmul_ratio(width=64, reps=1, rounds=1, threads=1) > 0
    assert sweep_rungs.torch.get_num_threads() == before
