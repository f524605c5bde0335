"""The figures of a run: per variant (``summarize``), the ratios between variants, the issue's targets,
and the printed report."""

from __future__ import annotations

import statistics

from .runners import RunResult
from .settings import TARGETS, BenchSettings
from .variants import VARIANTS


def summarize(
    results: list[RunResult],
    settings: BenchSettings,
    flops_token: float,
    peak_flops: float,
    peak_cpu_flops: float,
    memory_runs: list[RunResult] = (),
) -> dict:
    measured = [r for r in (*results, *memory_runs) if r.peak_memory_bytes is not None]
    memory = [r.peak_memory_bytes for r in measured]
    memory_kind = measured[0].memory_kind if measured else ""
    steps = [s for r in results for s in r.step_s]
    waits = [w for r in results for w in r.wait_s]
    tokens_per_step = settings.batch_size * settings.block_size
    cpu = [c for r in results for c in r.cpu_s]
    median_step = statistics.median(steps)
    tokens_per_s = tokens_per_step / median_step
    return {
        "cpu_ms_per_step": statistics.median(cpu) * 1e3,
        "tokens_per_cpu_s": tokens_per_step / statistics.median(cpu),
        "cpu_share": sum(cpu) / sum(steps),
        "tokens_per_s": tokens_per_s,
        "ms_per_step": median_step * 1e3,
        "ms_per_step_mean": statistics.fmean(steps) * 1e3,
        "ms_per_step_min": min(steps) * 1e3,
        "ms_per_step_max": max(steps) * 1e3,
        "achieved_flops_per_s": tokens_per_s * flops_token,
        "mfu": tokens_per_s * flops_token / peak_flops,
        "mfu_cpu_time": tokens_per_step / statistics.median(cpu) * flops_token / peak_cpu_flops,
        "data_wait_fraction": sum(waits) / sum(steps),
        "data_wait_ms_median": statistics.median(waits) * 1e3,
        # The smallest measurement: a process's first use of a library (Lightning's logger, oneDNN
        # buffers) allocates once, in whichever variant comes first.
        "peak_memory_bytes": min(memory) if memory else None,
        "peak_memory_kind": memory_kind,
        "rounds": [
            {
                "tokens_per_s": tokens_per_step / statistics.median(r.step_s),
                "cpu_ms_per_step": statistics.median(r.cpu_s) * 1e3,
                "ms_per_step": statistics.median(r.step_s) * 1e3,
                "peak_memory_bytes": r.peak_memory_bytes,
                "final_loss": r.final_loss,
                "load_average_end": r.load_average,
            }
            for r in results
        ],
        **{key: statistics.median(r.extras[key] for r in results) for key in results[0].extras},
        "step_ms": [s * 1e3 for s in steps],
        "cpu_step_ms": [c * 1e3 for c in cpu],
        "data_wait_ms": [w * 1e3 for w in waits],
    }


def pair_ratio(top: list[RunResult], bottom: list[RunResult]) -> dict:
    """tokens/s of ``top`` over ``bottom`` (= step time of bottom / step time of top), from pooled
    medians, per round, from CPU time, and as the median of step-by-step ratios (paired when the
    two ran interleaved)."""
    med = statistics.median
    per_round = [med(b.step_s) / med(t.step_s) for t, b in zip(top, bottom)]
    per_step = [bs / ts for t, b in zip(top, bottom) for ts, bs in zip(t.step_s, b.step_s)]
    return {
        "pooled_median": med([x for b in bottom for x in b.step_s]) / med([x for t in top for x in t.step_s]),
        "cpu_time": med([x for b in bottom for x in b.cpu_s]) / med([x for t in top for x in t.cpu_s]),
        "per_round": per_round,
        "median_of_rounds": med(per_round),
        "paired_steps": med(per_step),
    }


def _double_ratio(num: dict, den: dict) -> dict:
    """(x / reference in x's run) / (baseline / reference in the baseline's run), key by key."""
    out = {key: num[key] / den[key] for key in ("pooled_median", "cpu_time", "median_of_rounds", "paired_steps")}
    out["per_round"] = [a / b for a, b in zip(num["per_round"], den["per_round"])]
    return out


def evaluate_targets(report: dict) -> list[dict]:
    """The issue's targets that apply to this run's device, precision and model, met or not.

    Judged on wall-clock figures, as the targets are stated; on the CPU the same figure from the
    process's CPU time is given beside it (robust to other processes sharing the cores).
    """
    s, cfg = report["settings"], report["model_config"]
    out = []
    ratios, variants = report["ratios"], report["variants"]
    cpu = s["device"] == "cpu"
    if cpu:
        if ratios.get("lightning_over_bare"):
            r = ratios["lightning_over_bare"]
            out.append(
                {
                    "target": "(a)/(b) >= 0.97 on CPU",
                    "value": r["pooled_median"],
                    "value_cpu_time": r["cpu_time"],
                    "threshold": TARGETS["lightning_over_bare"],
                }
            )
        if ratios.get("bare_over_hf") and cfg["d_model"] >= 512:
            r = ratios["bare_over_hf"]
            out.append(
                {
                    "target": "(b)/(c) >= 1.2 on CPU, mid-sized preset",
                    "value": r["pooled_median"],
                    "value_cpu_time": r["cpu_time"],
                    "threshold": TARGETS["bare_over_hf"],
                }
            )
        if s["precision"] == "32-true" and cfg["d_model"] >= 512:
            for name in ("bare", "lightning"):
                if "tokens_per_s" in variants.get(name, {}):
                    out.append(
                        {
                            "target": f"CPU fp32 MFU >= 35 % (d_model >= 512), {name}",
                            "value": variants[name]["mfu"],
                            "value_cpu_time": variants[name]["mfu_cpu_time"],
                            "threshold": TARGETS["cpu_fp32_mfu"],
                        }
                    )
    elif s["device"].startswith("cuda") and s["precision"] == "bf16-mixed" and s["preset"] == "andrea-120m":
        for name in ("lightning", "bare"):
            if "tokens_per_s" in variants.get(name, {}):
                out.append(
                    {
                        "target": f"GPU bf16 MFU >= 45 % (andrea-120m{', compile' if s['compile'] else ''}), {name}",
                        "value": variants[name]["mfu"],
                        "threshold": TARGETS["cuda_bf16_mfu"],
                    }
                )
    for item in out:
        item["met"] = item["value"] >= item["threshold"]
        if "value_cpu_time" in item:
            item["met_cpu_time"] = item["value_cpu_time"] >= item["threshold"]
    return out


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def _fmt_flops(x: float) -> str:
    return f"{x / 1e12:.1f} TFLOP/s" if x >= 1e12 else f"{x / 1e9:.1f} GFLOP/s"


def _header(report: dict) -> list[str]:
    s, m, cfg = report["settings"], report["machine"], report["model_config"]
    return [
        f"ANDREA training throughput -- {s['preset']} (d_model {cfg['d_model']}, {cfg['n_layer']} layers, "
        f"vocab {cfg['vocab_size']}), batch {s['batch_size']} x block {s['block_size']} = "
        f"{report['tokens_per_step']} tokens/step, {s['device']} {s['precision']}{' compile' if s['compile'] else ''}",
        f"machine: {m['device_name']}, {m['cpus_usable']} cores, torch {m['torch']} ({m['torch_threads']} threads), "
        f"{m['date']}; load average {_fmt_load(m['load_average_start'])} at start, "
        f"{_fmt_load(m['load_average_end'])} at end",
        f"{s['rounds']} rounds x ({s['warmup']} warm-up + {s['steps']} timed steps); "
        + (
            "(a), (b), (c) alternating step by step within each round, peak memory from a separate short run each"
            if s["schedule"] == "steps"
            else "each variant alone, order rotated each round"
        )
        + "; medians of all timed steps",
        "",
    ]


def _variant_rows(report: dict, cpu: bool) -> list[str]:
    head = f"{'variant':<36} {'tokens/s':>9} {'ms/step':>9} {'peak mem':>9} {'MFU':>6} {'data wait':>9}"
    lines = [head + (f" {'CPU ms/step':>11} {'MFU (CPU t)':>11}" if cpu else "")]
    for name, v in report["variants"].items():
        label = VARIANTS[name].short if name in VARIANTS else name
        if "skipped" in v:
            lines.append(f"{label:<36} skipped: {v['skipped']}")
            continue
        memory = "n/a" if v["peak_memory_bytes"] is None else _fmt_bytes(v["peak_memory_bytes"])
        row = (
            f"{label:<36} {v['tokens_per_s']:>9,.0f} {v['ms_per_step']:>9,.1f} "
            f"{memory:>9} {v['mfu']:>6.1%} {v['data_wait_fraction']:>9.2%}"
        )
        if cpu:
            row += f" {v['cpu_ms_per_step']:>11,.1f} {v['mfu_cpu_time']:>11.1%}"
        lines.append(row)
    return lines + [""]


def _ratio_rows(report: dict, cpu: bool) -> list[str]:
    lines = [f"{'ratio of tokens/s':<30} {'wall':>6} {'paired':>7} {'CPU time' if cpu else '':>9}   per round (wall)"]
    rows = [
        ("(a)/(b) Lightning / bare", report["ratios"].get("lightning_over_bare")),
        ("(b)/(c) ANDREA / HF GPT-2", report["ratios"].get("bare_over_hf")),
    ]
    rows += [(f"{name} / {VARIANTS[name].kind}", r) for name, r in report["ratios"].get("ablations", {}).items()]
    for text, r in rows:
        if r:
            rounds = ", ".join(f"{x:.3f}" for x in r["per_round"])
            cpu_col = f"{r['cpu_time']:>9.3f}" if cpu else f"{'':>9}"
            lines.append(f"{text:<30} {r['pooled_median']:>6.3f} {r['paired_steps']:>7.3f} {cpu_col}   {rounds}")
    lines.append(
        "(wall: ratio of the pooled median step times; paired: median of step-by-step ratios; "
        "Lightning ablations: relative to (a), each through the (b) stepped beside it)"
    )
    return lines


def _notes(report: dict, cpu: bool) -> list[str]:
    fl, cfg, peak = report["flops_per_token"], report["model_config"], report["matmul_peak"]
    lines = [
        "",
        f"FLOPs/token = 6*N + 12*L*H*Q*T = 6*{fl['N']:,} + 12*{cfg['n_layer']}*{cfg['d_model']}*{fl['seq_len']} "
        f"= {fl['total'] / 1e6:,.2f} MFLOP  (PaLM; N = all parameters except the position table, the tied "
        f"embedding once; attention over all T keys)",
        f"MFU = FLOPs/token x tokens/s / matmul peak; peak = {peak['dtype']} torch.mm {peak['size']}^3 in this run, "
        f"median of {len(peak['measurements'])}: {_fmt_flops(peak['flops_per_s'])} "
        f"(range {_fmt_flops(min(peak['measurements']))} .. {_fmt_flops(max(peak['measurements']))})",
    ]
    check = report["variants"].get("bare", {}).get("nonfinite_check_ms")
    if check is not None:
        lines.append(
            f"AndreaLM's per-step grad-norm + non-finite check, timed alone on (b)'s gradients: {check:.1f} ms "
            f"= {check / report['variants']['bare']['ms_per_step']:.1%} of (b)'s step"
        )
    if cpu:
        lines.append(
            f"CPU-time columns: the same per CPU-second of this process (peak {_fmt_flops(peak['flops_per_cpu_s'])} "
            "per CPU-second), insensitive to other processes taking the cores"
        )
    first = next((v for v in report["variants"].values() if v.get("peak_memory_kind")), None)
    if first:
        lines.append(f"peak memory: {first['peak_memory_kind']}, the smallest measurement")
    for t in report["targets"]:
        line = f"target {t['target']}: {'MET' if t['met'] else 'NOT met'} ({t['value']:.3f} vs {t['threshold']})"
        if "value_cpu_time" in t:
            line += f"; CPU time: {'MET' if t['met_cpu_time'] else 'NOT met'} ({t['value_cpu_time']:.3f})"
        lines.append(line)
    return lines


def format_report(report: dict) -> str:
    cpu = report["settings"]["device"] == "cpu"
    return "\n".join(_header(report) + _variant_rows(report, cpu) + _ratio_rows(report, cpu) + _notes(report, cpu))


def _fmt_load(load: list[float]) -> str:
    return " ".join(f"{x:.2f}" for x in load)
