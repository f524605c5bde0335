"""A benchmark script must not share its name with an installed module.

``python benchmarks/X.py`` puts ``benchmarks/`` first on ``sys.path``, so a script named like a
package some dependency imports shadows it: ``benchmarks/kernels.py`` once made transformers'
``from kernels import ...`` (Hugging Face's ``kernels`` package) fail inside the throughput
benchmark, on machines where that package happened to be installed.
"""

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _names_shadowing_installed_modules() -> list[str]:
    here = str(BENCHMARKS)
    saved = list(sys.path)
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != BENCHMARKS and p != here]
    try:
        names = sorted({p.stem for p in BENCHMARKS.glob("*.py")} | {p.name for p in BENCHMARKS.iterdir() if p.is_dir()})
        return [n for n in names if not n.startswith("_") and importlib.util.find_spec(n) is not None]
    finally:
        sys.path[:] = saved


def test_no_benchmark_script_or_folder_shadows_an_installed_module():
    assert _names_shadowing_installed_modules() == []


def test_the_check_sees_a_clash(tmp_path, monkeypatch):
    """The check itself can fail: a module 'json' beside the scripts would be reported."""
    (tmp_path / "json.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "BENCHMARKS", tmp_path)
    assert _names_shadowing_installed_modules() == ["json"]
