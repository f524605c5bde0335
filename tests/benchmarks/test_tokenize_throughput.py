"""The data benchmark runs end to end at toy sizes and reports every figure docs/performance.md quotes,
with each process's own peak memory (not a parent's carried into ``ru_maxrss``)."""

from __future__ import annotations

import json
import resource

import pytest

from benchmarks import tokenize_throughput


@pytest.mark.slow
def test_toy_run_reports_every_figure(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert (
        tokenize_throughput.main(
            [
                "--mb",
                "0.3",
                "--memory-mb",
                "0.3",
                "--workers",
                "2",
                "--vocab-size",
                "300",
                "--loader-batches",
                "2",
                "--json",
                str(out),
            ]
        )
        == 0
    )
    results = json.loads(out.read_text())
    assert set(results["tokens_per_s"]) == {"encode_batch", "pipeline_1w", "pipeline_2w"}
    assert all(rate > 0 for rate in results["tokens_per_s"].values())
    one, four = results["memory"]["1x_0.3MB"], results["memory"]["4x_1.2MB"]
    assert four["tokens"] > 3 * one["tokens"] > 0
    assert one["worker_mb"] > 0 and four["worker_mb"] > 0
    # The memory child's own high-water mark: below this test process's (which holds torch, the
    # corpus and the tokenizer), which is what ru_maxrss would have reported for it.
    ours_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    assert 0 < one["main_mb"] < ours_mb
    assert results["loader_tokens_per_s"] > 0
