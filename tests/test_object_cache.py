"""The disk cache of machine code (runtime/object_cache.py): a module compiled once is loaded, not
compiled, by the next JIT of the same IR, in this process or another, and runs the same; a
damaged entry, an unwritable directory or NPUGRAD_CACHE_DIR=off only cost a compile. (The
passes' LLVM IR kept beside it: test_ir_cache.py.)"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys

import numpy as np
import pytest
from llvm_loops import counted_loop

from npugrad.runtime import object_cache
from npugrad.runtime.jit import JitModule

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# out[i] = a[i] * b[i] + 1 for i < n; a vectorisable loop, so O3 and code generation have work to do.
AXPB = counted_loop("axpb", "ptr noalias %a, ptr noalias %b, ptr noalias %out", """
    %pa = getelementptr float, ptr %a, i64 %i
    %pb = getelementptr float, ptr %b, i64 %i
    %x = load float, ptr %pa
    %y = load float, ptr %pb
    %m = fmul float %x, %y
    %r = fadd float %m, 1.0
    %po = getelementptr float, ptr %out, i64 %i
    store float %r, ptr %po
""")

SIGNATURE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "objects"
    monkeypatch.setenv("NPUGRAD_CACHE_DIR", str(d))
    return d


def _run(module: JitModule, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = 1003  # not a multiple of any vector width
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    out = np.zeros(n, np.float32)
    SIGNATURE(module.address("axpb"))(a.ctypes.data, b.ctypes.data, out.ctypes.data, n)
    return out, a * b + np.float32(1)


def _entries(d) -> list[str]:
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


def test_second_jit_of_the_same_ir_loads_the_code(cache_dir, rng):
    first = JitModule(AXPB)
    assert not first.from_cache
    assert _entries(cache_dir) == [f"{object_cache.key(AXPB)}.o"]
    second = JitModule(AXPB)
    assert second.from_cache
    seed = int(rng.integers(2**31))
    got1, want = _run(first, seed)
    got2, _ = _run(second, seed)
    np.testing.assert_allclose(got1, want, rtol=1e-6)
    assert got1.tobytes() == got2.tobytes()  # the cached code is the same code


def test_other_ir_is_another_entry(cache_dir):
    JitModule(AXPB)
    other = JitModule(AXPB.replace("fadd float %m, 1.0", "fadd float %m, 2.0"))
    assert not other.from_cache and len(_entries(cache_dir)) == 2


def test_the_key_holds_the_cpu_and_llvm(monkeypatch):
    before = object_cache.key(AXPB)
    object_cache._machine.cache_clear()
    monkeypatch.setattr(object_cache.llvm, "get_host_cpu_name", lambda: "some-other-cpu")
    try:
        assert object_cache.key(AXPB) != before
    finally:
        object_cache._machine.cache_clear()


@pytest.mark.parametrize("damage", ["truncated", "flipped", "empty", "foreign"])
def test_a_damaged_entry_is_compiled_again_and_rewritten(cache_dir, rng, damage):
    JitModule(AXPB)
    [name] = _entries(cache_dir)
    path = cache_dir / name
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "flipped": data[:-1] + bytes([data[-1] ^ 1]),
                      "empty": b"", "foreign": b"\x7fELF" + data[4:]}[damage])
    again = JitModule(AXPB)
    assert not again.from_cache
    got, want = _run(again, int(rng.integers(2**31)))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert path.read_bytes() == data and JitModule(AXPB).from_cache


@pytest.mark.parametrize("how", ["copied", "linked"])
def test_another_entry_in_an_entrys_place_is_compiled_again(cache_dir, rng, how):
    """The whole entry of another kernel with the same symbols (here: + 2 where AXPB adds 1; the
    same op for another dtype) copied or linked under this one's name: its digest held, and the
    other kernel ran, its results wrong (BCE float32 given float16's code: NaN)."""
    other_ir = AXPB.replace("fadd float %m, 1.0", "fadd float %m, 2.0")
    JitModule(AXPB)
    JitModule(other_ir)
    path, other = cache_dir / f"{object_cache.key(AXPB)}.o", cache_dir / f"{object_cache.key(other_ir)}.o"
    path.unlink()
    if how == "copied":
        path.write_bytes(other.read_bytes())
    else:
        path.symlink_to(other.name)
    again = JitModule(AXPB)
    assert not again.from_cache
    got, want = _run(again, int(rng.integers(2**31)))
    np.testing.assert_allclose(got, want, rtol=1e-6)
    assert JitModule(AXPB).from_cache


@pytest.mark.parametrize("setting", ["off", ""])
def test_off_keeps_nothing(tmp_path, monkeypatch, setting):
    monkeypatch.setenv("NPUGRAD_CACHE_DIR", setting)
    monkeypatch.chdir(tmp_path)
    assert object_cache.directory() is None
    assert not JitModule(AXPB).from_cache and not JitModule(AXPB).from_cache
    assert list(tmp_path.iterdir()) == []


def test_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.delenv("NPUGRAD_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert object_cache.directory() == str(tmp_path / "npugrad")


def test_an_unusable_directory_only_costs_a_compile(tmp_path, monkeypatch, rng):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("NPUGRAD_CACHE_DIR", str(blocker / "objects"))
    module = JitModule(AXPB)
    assert not module.from_cache and not JitModule(AXPB).from_cache
    got, want = _run(module, int(rng.integers(2**31)))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_another_process_loads_an_op_kernel(cache_dir):
    """An op compiled in one interpreter is loaded from disk in the next, its LLVM IR
    (ir_cache.py: no pass runs) and its machine code, and computes the same bits (the BCE
    gradient on fixed inputs)."""
    code = (
        "import numpy as np; from npugrad import ops; from npugrad.runtime import specialize\n"
        "from npugrad.compiler import Pipeline\n"
        "ran = []; lower = Pipeline.lower\n"
        "Pipeline.lower = lambda self, *a, **k: ran.append(1) or lower(self, *a, **k)\n"
        "x = np.linspace(0.05, 0.95, 1001, dtype=np.float32); y = x[::-1].copy()\n"
        "g = ops.binary_cross_entropy_grad(x, y, np.float32(0.5))\n"
        "[k] = specialize._CACHE.values()\n"
        "print(int(k.ir_from_cache), int(k._jit.from_cache), len(ran), g.tobytes().hex())\n"
    )
    runs = [subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                           cwd=ROOT, env={**os.environ, "NPUGRAD_CACHE_DIR": str(cache_dir)}).stdout.split()
            for _ in range(2)]
    assert runs[0][:3] == ["0", "0", "1"] and runs[1][:3] == ["1", "1", "0"]
    assert runs[0][3] == runs[1][3]
    assert sorted(p.suffix for p in cache_dir.iterdir()) == [".ll", ".o"]


def test_the_cache_command_counts_and_clears_only_its_entries(cache_dir):
    JitModule(AXPB)
    JitModule(AXPB.replace("1.0", "3.0"))
    (cache_dir / "notes.txt").write_text("not an entry")

    def command(*args: str) -> str:
        return subprocess.run([sys.executable, "-m", "npugrad.tools.main", "cache", *args], check=True,
                              capture_output=True, text=True, cwd=ROOT,
                              env={**os.environ, "NPUGRAD_CACHE_DIR": str(cache_dir)}).stdout

    (cache_dir / f"{'0' * 64}.ll").write_bytes(b"")  # named as the passes' LLVM IR is (ir_cache.py)
    assert f"{cache_dir}: 3 entries (2 machine code, 1 LLVM IR)" in command()
    assert "deleted 3 entries" in command("--clear")
    assert _entries(cache_dir) == ["notes.txt"] and f"{cache_dir}: 0 entries" in command()


def test_a_reader_that_stops_early_ends_the_command_quietly(cache_dir):
    """`npugrad cache | head -0`: the pipe closes before the command writes. It ends as a shell
    tool does (status 128 + SIGPIPE), with no traceback on stderr."""
    p = subprocess.Popen([sys.executable, "-m", "npugrad.tools.main", "cache"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, cwd=ROOT, env={**os.environ, "NPUGRAD_CACHE_DIR": str(cache_dir)})
    p.stdout.close()  # before the interpreter has started: the command's first write finds no reader
    stderr = p.stderr.read().decode()
    assert p.wait(timeout=60) == 141, stderr
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
