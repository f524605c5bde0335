"""benchmarks/gpu_check.py without a GPU: the dry run writes a section for every part, a part past its
time cap is stopped (its whole process group) and reported while the rest go on, a missing package or
tool is its own outcome, and the readers understand what the real commands write."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import tarfile
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytest_plugins = ["pytester"]


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


gc = _load("andrea_gpu_check", ROOT / "benchmarks" / "gpu_check.py")
parts = _load("andrea_gpu_check_parts", ROOT / "benchmarks" / "gpu_check_parts.py")
PY = sys.executable


def _python(code: str) -> list[str]:
    return [PY, "-c", textwrap.dedent(code)]


@pytest.mark.slow
def test_dry_run_writes_a_section_for_every_part(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    assert gc.main(["--dry-run", "--out", str(out), "--work", str(work)]) == 0
    report = json.loads((out / "gpu_check.json").read_text())
    names = [p.name for p in gc.plan(work, dry_run=False)]
    assert names == list(report["parts"]) == [p.name for p in gc.plan(work, dry_run=True)]
    assert {
        "gpu_tests",
        "sanitizer_memcheck",
        "sanitizer_racecheck",
        "kernels_bf16",
        "kernels_fp32",
        "fit_cuda_vs_torch",
        "throughput_eager",
        "throughput_compiled",
    } <= set(names)
    assert report["mode"] == "dry_run" and report["ok"]
    for name, section in report["parts"].items():
        assert section["status"] in ("ok", "dry_run"), (name, section["reason"], section["log_tail"])
        assert section["command"] and section["cap_s"] > 0
    env = report["parts"]["environment"]["result"]
    assert env["torch"]["version"] and env["cuda_backend"]["available"] is False
    assert report["parts"]["fit_cuda_vs_torch"]["result"]["exit_codes"] == {"cuda": 0}
    tiny = report["parts"]["throughput_eager"]["result"]  # the real benchmark's JSON, read by the real reader
    assert tiny["variants"]["bare"]["tokens_per_s"] > 0 and tiny["matmul_peak_flops_per_s"] > 0
    summary = (out / "gpu_check.md").read_text()
    assert all(f"| {name} |" in summary for name in names)
    with tarfile.open(out / "gpu_check_logs.tar.gz") as tar:
        assert {f"{name}.log" for name in names} <= set(tar.getnames())


def test_a_part_past_its_cap_is_stopped_with_its_children_and_the_rest_go_on(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    sleeper = gc.Part(
        "sleeper",
        "sleeps past its cap",
        _python(f"""
        import subprocess, sys, time
        ignore_term = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(120)"
        child = subprocess.Popen([sys.executable, "-c", ignore_term])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(120)
    """),
        cap_s=3,
    )
    after = gc.Part("after", "runs after the sleeper", _python("print('still ran')"), cap_s=30)
    start = time.monotonic()
    sections = gc.run_all([sleeper, after], tmp_path, budget_s=100)
    assert time.monotonic() - start < 60
    assert [s.status for s in sections] == ["timeout", "ok"]
    assert sections[0].returncode is None and "stopped after 3 s" in sections[0].reason
    assert "started" in sections[0].log_tail
    grandchild = int(pid_file.read_text())
    for _ in range(50):  # reparented and reaped shortly after the kill
        if not _alive(grandchild):
            break
        time.sleep(0.1)
    assert not _alive(grandchild), "the part's child process outlived the cap"
    report = gc.build_report(sections, False, 100, time.time(), 5.0)
    gc.write_outputs(tmp_path / "out", report, tmp_path)
    saved = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert saved["statuses"] == {"sleeper": "timeout", "after": "ok"} and saved["ok"] is False
    assert "## sleeper: timeout" in (tmp_path / "out" / "gpu_check.md").read_text()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as handle:  # a zombie is dead
        return handle.read().split(") ")[-1][0] != "Z"


def test_the_budget_cuts_what_would_start_after_it(tmp_path):
    first = gc.Part("first", "", _python("import time; time.sleep(30)"), cap_s=60)
    second = gc.Part("second", "", _python("pass"), cap_s=60)
    sections = gc.run_all([first, second], tmp_path, budget_s=2)
    assert [s.status for s in sections] == ["timeout", "not_run"]
    assert "cut to what was left of the budget" in sections[0].reason
    assert "budget was spent" in sections[1].reason


def test_a_missing_package_or_tool_is_the_parts_outcome(tmp_path):
    package = gc.Part("needs_pkg", "", _python("pass"), 10, needs=("no_such_module_for_gpu_check",))
    tool = gc.Part("needs_tool", "", ["no-such-sanitizer"], 10, tool="no-such-sanitizer")
    a, b = gc.run_all([package, tool], tmp_path, budget_s=100)
    assert a.status == "missing_package" and "'no_such_module_for_gpu_check' is not installed" in a.reason
    assert "carry it as a wheel" in a.reason
    assert b.status == "unavailable" and "no-such-sanitizer not found" in b.reason


def test_unknown_parts_are_refused_naming_the_valid_ones(tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        gc.main(["--dry-run", "--parts", "gpu_test", "--out", str(tmp_path), "--work", str(tmp_path)])
    assert info.value.code == 2
    assert "unknown parts gpu_test; valid: environment, gpu_tests," in capsys.readouterr().err


def test_junit_counts_and_strict_gpu_skips(pytester, monkeypatch, tmp_path):
    """pytest's real JUnit XML: a gpu test skipped under ANDREA_REQUIRE_GPU=1 counts as an error."""
    monkeypatch.setenv("ANDREA_REQUIRE_GPU", "1")
    pytester.makepyfile(
        test_optional="""
        import pytest
        pytest.importorskip("no_such_optional_package")
        def test_never_collected(): pass
    """
    )
    pytester.makepyfile("""
        import pytest
        def test_passes(): pass
        def test_fails(): assert False
        @pytest.mark.skip(reason="not here")
        def test_skipped(): pass
        @pytest.mark.gpu
        def test_needs_gpu(): pass
    """)
    xml = tmp_path / "junit.xml"
    pytester.runpytest_inprocess("-p", "no:cacheprovider", f"--junitxml={xml}")
    counts = parts.junit_counts(xml)
    gpu_error = 1 if not _has_cuda() else 0
    assert (counts["passed"], counts["failed"], counts["skipped"], counts["errors"]) == (
        1 + 1 - gpu_error,
        1,
        1,
        gpu_error,
    )
    assert counts["skipped_at_collection"] == 1
    assert any("no_such_optional_package" in line for line in counts["not_passed"])
    part = gc.Part("gpu_tests", "", [], 1, result_json=xml)
    assert parts.read_junit(part, 1, "")[0] == "failed"


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.parametrize(
    "code,log,status",
    [
        (0, "ran 17 cases\n========= ERROR SUMMARY: 0 errors\n", "ok"),
        (86, "========= Invalid __global__ read of size 16 bytes\n========= ERROR SUMMARY: 3 errors\n", "failed"),
        (255, "========= Error: Device not supported\n", "refused"),
        (1, "Traceback ...\nRuntimeError: boom\n", "failed"),
    ],
)
def test_sanitizer_outcomes(code, log, status):
    assert parts.read_sanitizer(gc.Part("sanitizer_memcheck", "", [], 1), code, log)[0] == status


def test_kernels_reader_takes_each_ops_largest_size(tmp_path):
    kernels = _load("andrea_benchmark_kernels_for_gpu_check", ROOT / "benchmarks" / "kernel_bandwidth.py")
    results = [
        kernels.Result("gelu_fwd", impl, n, 2 * n * 2, 1.0, 100.0, frac)
        for n, impl, frac in ((1 << 20, "cuda", 0.5), (1 << 24, "cuda", 0.9), (1 << 24, "eager", 0.7))
    ]
    path = tmp_path / "k.json"
    path.write_text(
        json.dumps(
            kernels.report_json(
                device="X",
                sms=132,
                l2_bytes=1,
                args=kernels.parse_args([]),
                backend="b",
                copy_gbps={1 << 24: 4000.0},
                peak_copy=4000.0,
                verdicts=[],
                results=results,
            )
        )
    )
    status, result = parts.read_kernels(gc.Part("kernels_bf16", "", [], 1, result_json=path), 0, "")
    assert status == "ok" and result["copy_peak_gbps"] == 4000.0
    assert result["fraction_of_copy_at_largest"] == {"gelu_fwd": {"elements": 1 << 24, "cuda": 0.9, "eager": 0.7}}
    assert parts.brief_kernels(result) == "copy 4,000 GB/s; at the largest size, of copy: gelu_fwd 90% (eager 70%)"
