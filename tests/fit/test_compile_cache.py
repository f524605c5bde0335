import io
import os
import shutil
import subprocess
import sys
from collections import namedtuple
from pathlib import Path

import pytest
import torch

from andrea_lab.fit import compile_cache
from andrea_lab.fit.compile_cache import COMPILE_DIR, INDUCTOR_ENV_VAR, compile_key, use_compile_cache

SHAPE = {"d_model": 64, "n_layer": 6, "n_head": 4, "vocab_size": 257}


@pytest.fixture(autouse=True)
def no_inductor_dir(monkeypatch):
    """Every test starts without the variable and gets the process's own value back afterwards."""
    monkeypatch.delenv(INDUCTOR_ENV_VAR, raising=False)


def test_key_changes_with_what_changes_a_compile(monkeypatch):
    base = compile_key(SHAPE, "32-true")
    assert compile_key(dict(reversed(list(SHAPE.items()))), "32-true") == base  # order is not identity
    assert compile_key({**SHAPE, "d_model": 128}, "32-true") != base
    assert compile_key(SHAPE, "bf16-mixed") != base
    monkeypatch.setattr(torch, "__version__", "9.9.9")
    assert compile_key(SHAPE, "32-true") != base
    monkeypatch.undo()
    monkeypatch.delenv(INDUCTOR_ENV_VAR, raising=False)
    monkeypatch.setattr(compile_cache, "_plugin_versions", lambda: ["andrea-lab==0.1.0", "some-plugin==2.0"])
    assert compile_key(SHAPE, "32-true") != base


def test_entry_in_the_users_cache_cold_then_warm(tmp_path):
    first = use_compile_cache(SHAPE, "32-true", root=tmp_path)
    entry = tmp_path / COMPILE_DIR / first.key
    assert (first.state, first.directory, os.environ[INDUCTOR_ENV_VAR]) == ("cold", str(entry), str(entry))
    assert entry.stat().st_mode & 0o777 == 0o700
    (entry / "fxgraph").mkdir()  # what a compile leaves there
    assert use_compile_cache(SHAPE, "32-true", root=tmp_path).state == "warm"
    other = use_compile_cache({**SHAPE, "d_model": 128}, "32-true", root=tmp_path)
    assert other.state == "cold" and other.directory != first.directory


def test_the_users_own_inductor_directory_is_left_alone(tmp_path, monkeypatch):
    monkeypatch.setenv(INDUCTOR_ENV_VAR, str(tmp_path / "mine"))
    cache = use_compile_cache(SHAPE, "32-true", root=tmp_path / "root")
    assert cache.state == "user" and os.environ[INDUCTOR_ENV_VAR] == str(tmp_path / "mine")
    assert not (tmp_path / "root").exists()


def _private(tmp_path: Path, root: Path) -> tuple[compile_cache.CompileCache, str]:
    err = io.StringIO()
    cache = use_compile_cache(SHAPE, "32-true", root=root, err=err)
    assert cache.state == "private", cache
    assert os.environ[INDUCTOR_ENV_VAR] == cache.directory and os.path.isdir(cache.directory)
    assert not cache.directory.startswith(str(root))
    assert len(err.getvalue().strip().splitlines()) == 1
    return cache, err.getvalue()


def test_a_linked_cache_is_not_written_through(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "root").mkdir()
    (tmp_path / "root" / COMPILE_DIR).symlink_to(target)
    cache, line = _private(tmp_path, tmp_path / "root")
    assert "symbolic link" in line and str(tmp_path / "root" / COMPILE_DIR) in line
    assert list(target.iterdir()) == []


def test_a_linked_root_is_not_written_through(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "root").symlink_to(tmp_path / "real")
    _, line = _private(tmp_path, tmp_path / "root")
    assert "symbolic link" in line and list((tmp_path / "real").iterdir()) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_an_unwritable_cache_compiles_privately(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    root.chmod(0o500)
    try:
        _, line = _private(tmp_path, root)
    finally:
        root.chmod(0o700)
    assert str(root) in line


def test_an_entry_others_can_write_is_not_trusted(tmp_path):
    key = compile_key(SHAPE, "32-true")[:16]
    entry = tmp_path / COMPILE_DIR / key
    entry.mkdir(parents=True)
    entry.chmod(0o777)
    _, line = _private(tmp_path, tmp_path)
    assert "writable by others" in line


def test_a_full_disk_compiles_privately(tmp_path, monkeypatch):
    usage = namedtuple("usage", "total used free")
    real = shutil.disk_usage
    monkeypatch.setattr(
        compile_cache.shutil,
        "disk_usage",
        lambda path: usage(1 << 30, 1 << 30, 1 << 20) if str(path).startswith(str(tmp_path)) else real(path),
    )
    _, line = _private(tmp_path, tmp_path)
    assert "1 MiB free" in line


PROBE = """
import sys, time, torch
from andrea_lab.fit.compile_cache import use_compile_cache, compile_counters
use_compile_cache({"probe": 1}, "32-true")
f = torch.compile(lambda x: torch.nn.functional.gelu(x) * 2 + 1)
print(float(f(torch.ones(4)).sum()), compile_counters()["fxgraph_cache_hit"])
"""


@pytest.mark.slow
def test_a_second_process_loads_what_the_first_compiled(tmp_path):
    env = {**os.environ, "ANDREA_LAB_CACHE": str(tmp_path)}
    env.pop(INDUCTOR_ENV_VAR, None)
    runs = [subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True) for _ in "ab"]
    assert all(r.returncode == 0 for r in runs), runs[0].stderr[-2000:]
    (value_a, hits_a), (value_b, hits_b) = (r.stdout.split() for r in runs)
    assert value_a == value_b and int(hits_a) == 0 and int(hits_b) >= 1
    assert any((tmp_path / COMPILE_DIR).iterdir())


def test_inductors_own_default_in_the_variable_is_not_the_users(tmp_path, monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    cache_dir()  # what Inductor does when it first looks: it writes its default into the variable
    assert os.environ[INDUCTOR_ENV_VAR]
    cache = use_compile_cache(SHAPE, "32-true", root=tmp_path)
    assert cache.state == "cold" and os.environ[INDUCTOR_ENV_VAR] == str(tmp_path / COMPILE_DIR / cache.key)


def test_is_warm_once_the_users_entry_holds_a_compile(tmp_path, monkeypatch):
    monkeypatch.setenv("ANDREA_LAB_CACHE", str(tmp_path))
    assert not compile_cache.is_warm(SHAPE, "bf16-mixed")
    cache = use_compile_cache(SHAPE, "bf16-mixed")
    assert not compile_cache.is_warm(SHAPE, "bf16-mixed")  # made, still empty
    (Path(cache.directory) / "fxgraph").mkdir()
    assert compile_cache.is_warm(SHAPE, "bf16-mixed") and not compile_cache.is_warm(SHAPE, "32-true")


def test_a_compiled_fit_records_where_its_compile_went(tmp_path):
    from types import SimpleNamespace

    from andrea_lab.fit.summary import _machine

    cache = use_compile_cache(SHAPE, "bf16-mixed", root=tmp_path)
    module = SimpleNamespace(device=torch.device("cpu"), compile_cache=cache)
    record = _machine(SimpleNamespace(precision="bf16-mixed"), module)
    assert record["precision"] == "bf16-mixed"
    assert record["compile"]["state"] == "cold" and record["compile"]["directory"] == cache.directory
    assert {"fxgraph_cache_hit", "autograd_cache_miss", "compile_s"} <= set(record["compile"])
    assert "compile" not in _machine(SimpleNamespace(precision="32-true"), SimpleNamespace(device=torch.device("cpu")))


def test_an_entry_this_process_cannot_write_compiles_privately(tmp_path, monkeypatch):
    """The same refusal where the test runs as root (who can write anywhere): the access check says no."""
    real = os.access

    def access(path, mode):
        return False if str(path).startswith(str(tmp_path)) else real(path, mode)

    monkeypatch.setattr(compile_cache.os, "access", access)
    _, line = _private(tmp_path, tmp_path)
    assert "is not writable" in line


def test_a_group_writable_umask_does_not_make_the_cache_untrusted(tmp_path):
    old = os.umask(0o002)  # user-private groups' default: new directories group-writable
    try:
        cache = use_compile_cache(SHAPE, "32-true", root=tmp_path / "root")
    finally:
        os.umask(old)
    assert cache.state == "cold" and (tmp_path / "root" / COMPILE_DIR).stat().st_mode & 0o777 == 0o700
