"""Targets as data: the shipped npu-a2 figures, `host` read off this machine, user files, and a
clear TargetError (naming the file and the field) for every way a file can be malformed."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from npugrad.targets import TargetError, get, load
from npugrad.targets.target import from_dict, host

BIN = Path(sys.executable).parent
KiB = 1024

USER = """\
name = "my-npu"
cores = 4
vector_bits = 512
vector_registers = 8
double_buffer = true

[roles]
vector = "vec"
stage = "stage"
matrix_a = "stage"
matrix_b = "stage"
accumulator = "vec"

[[level]]
name = "hbm"
kind = "global"

[[level]]
name = "stage"
capacity = "1MiB"
alignment = 64
unit = "mte"
parent = "hbm"

[[level]]
name = "vec"
capacity = 65536
alignment = 32
unit = "vector"
parent = "stage"
"""


def write(tmp_path: Path, text: str, name: str = "t.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- shipped -----------------------------------------------------------------------------------


def test_npu_a2_figures():
    t = get("npu-a2")
    assert (t.name, t.cores, t.vector_bits, t.double_buffer) == ("npu-a2", 20, 2048, True)
    assert t.global_level.name == "gm"
    capacities = {lv.name: lv.capacity for lv in t.local_levels()}
    assert capacities == {"l1": 512 * KiB, "l0a": 64 * KiB, "l0b": 64 * KiB, "l0c": 128 * KiB, "ub": 192 * KiB}
    assert {lv.alignment for lv in t.local_levels()} == {32}
    assert {lv.name: lv.unit for lv in t.local_levels()} == {
        "l1": "mte",
        "l0a": "cube",
        "l0b": "cube",
        "l0c": "cube",
        "ub": "vector",
    }
    assert {lv.name: lv.parent for lv in t.local_levels()} == {
        "l1": "gm",
        "l0a": "l1",
        "l0b": "l1",
        "l0c": "gm",
        "ub": "gm",
    }
    assert dict(t.roles) == {"vector": "ub", "stage": "l1", "matrix_a": "l0a", "matrix_b": "l0b", "accumulator": "l0c"}
    assert t.role("vector").capacity == 192 * KiB
    # The cost model's figures (cited in npu-a2.toml): 16x16x16 bf16 MACs per cycle at 1.8 GHz.
    assert t.clock_ghz == 1.8
    assert t.unit_for("matrix").rate("matrix", "bf16") == 16 * 16 * 16 * 2
    assert t.unit_for("vector").rate("vector", "f32") == 64
    assert t.global_level.bandwidth == pytest.approx(1.6e12 / 1.8e9, rel=1e-3)
    assert t.has_path("gm", "l1") and t.has_path("l1", "l0a") and not t.has_path("gm", "l0a")
    assert "cited" in t.costs


def _sys_cache(level: int) -> int:
    """One CPU's share of the level-`level` data cache, as /sys lists it."""
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        if int((index / "level").read_text()) == level and (index / "type").read_text().strip() != "Instruction":
            size = (index / "size").read_text().strip()
            factor = {"K": KiB, "M": KiB * KiB}.get(size[-1], 1)
            shared = 0
            for part in (index / "shared_cpu_list").read_text().strip().split(","):
                lo, _, hi = part.partition("-")
                shared += int(hi or lo) - int(lo) + 1
            return int(size.rstrip("KM")) * factor // shared
    pytest.skip(f"/sys lists no level-{level} data cache")


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    return next((set(line.split(":", 1)[1].split()) for line in text.splitlines() if line.startswith("flags")), set())


def test_host_cores():
    assert host().cores == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("level", [1, 2])
def test_host_cache_sizes_match_sys(level):
    assert host().level(f"l{level}").capacity == _sys_cache(level)


def test_host_vector_width():
    flags = _cpu_flags()
    want = 512 if "avx512f" in flags else 256 if flags & {"avx2", "avx"} else 128
    assert host().vector_bits == want


def test_host_costs():
    t = host()
    assert t.clock_ghz > 0 and "calibrate" in t.costs
    lanes = t.vector_bits // 32
    assert t.unit_for("matrix").rate("matrix", "f32") == 4 * lanes  # two FMA pipes
    assert all(t.has_path(a.name, b.name) for a in t.levels for b in t.levels)


def test_stream_prefetch_distance_comes_from_the_global_level():
    """Little's law: what one core consumes while a load is in flight (latency x its share of the
    global bandwidth), in whole lines; nothing without a latency. host's dram latency is its
    estimate at the host's clock, and its distance follows from its figures, not a constant."""
    base = USER.replace('kind = "global"', 'kind = "global"\nbandwidth = 16\nlatency = 300')
    t = from_dict(tomllib.loads(base))
    assert t.global_level.latency == 300
    assert t.stream_prefetch_bytes == 1216  # 300 x 16 / 4 cores = 1200 -> 38 lines of 32 (the 'vec' alignment)
    assert from_dict(tomllib.loads(USER)).stream_prefetch_bytes == 0
    assert get("npu-a2").stream_prefetch_bytes == 0
    h = host()
    g = h.global_level
    assert g.latency == pytest.approx(100 * h.clock_ghz)
    assert h.stream_prefetch_bytes % 64 == 0
    assert 0 < h.stream_prefetch_bytes - g.latency * g.bandwidth / h.cores <= 64
    # No further ahead than the largest local level holds (a latency of 1e30 cycles once made a
    # distance no i64 constant holds: the upstream parser's error, with no location).
    far = from_dict(tomllib.loads(USER.replace('kind = "global"', 'kind = "global"\nbandwidth = 16\nlatency = 1e30')))
    assert far.stream_prefetch_bytes == 1 << 20  # 'stage', 1 MiB


def test_stream_store_threshold_is_a_core_share_of_the_largest_level(monkeypatch):
    """Loops storing at least this much of an output write it past the caches: one core's
    share of the largest local level (host: its L3 share, as read off /sys); none where the
    machine code is not x86-64's (the store fence is x86's sfence)."""
    t = from_dict(tomllib.loads(USER))
    assert t.stream_store_bytes == max(lv.capacity for lv in t.local_levels())
    h = host()
    assert h.stream_store_bytes == h.level("l3").capacity
    monkeypatch.setattr("platform.machine", lambda: "aarch64")
    assert from_dict(tomllib.loads(USER)).stream_store_bytes == 0


def test_host_shape():
    t = get("host")
    assert t is host()  # read once
    assert t.global_level.name == "dram"
    assert [lv.name for lv in t.local_levels()] == ["l3", "l2", "l1"]
    assert [lv.parent for lv in t.levels] == [None, "dram", "l3", "l2"]
    assert not t.double_buffer


# -- user files --------------------------------------------------------------------------------


def test_user_file_round_trip(tmp_path):
    path = write(tmp_path, USER)
    t = load(path)
    assert (t.name, t.cores, t.vector_bits, t.vector_registers, t.double_buffer) == ("my-npu", 4, 512, 8, True)
    assert [(lv.name, lv.capacity, lv.alignment, lv.unit, lv.parent) for lv in t.levels] == [
        ("hbm", None, 1, "mte", None),
        ("stage", 1 << 20, 64, "mte", "hbm"),
        ("vec", 65536, 32, "vector", "stage"),
    ]
    assert t.role("vector").name == "vec" and t.role("matrix_a").name == "stage"
    assert t.source == str(path)
    assert get(str(path)) == t  # a path works wherever a target name does
    assert get(path).key() == t.key()


def test_register_block_round_trip(tmp_path):
    """`register_block` is the micro-kernel's block where given (block_shape), part of the key
    compiled code is cached by; without it the block is derived from the registers."""
    from npugrad.passes.vectorize_contractions import block_shape

    plain = load(write(tmp_path, USER))
    given = load(write(tmp_path, USER.replace("cores = 4", "cores = 4\nregister_block = [3, 1]"), "given.toml"))
    assert plain.register_block is None and block_shape(plain) == (2, 2)  # (8 - 2 - 2) // 2 rows of 2 vectors
    assert given.register_block == (3, 1) and block_shape(given) == (3, 1)
    assert given.key() != plain.key()


@pytest.mark.parametrize(
    "size, want",
    [("65536", 65536), ("64KiB", 64 * KiB), ("64 kib", 64 * KiB), ("2MiB", 2 << 20), ("1GiB", 1 << 30), ("512B", 512)],
)
def test_size_strings(tmp_path, size, want):
    t = load(write(tmp_path, USER.replace('capacity = "1MiB"', f'capacity = "{size}"')))
    assert t.level("stage").capacity == want


def test_user_target_drives_the_compiler(tmp_path):
    path = write(tmp_path, USER)
    mlir = write(
        tmp_path,
        "func.func @f(%x: memref<64xf32>, %y: memref<64xf32>, %d: memref<1xf32>, %dx: memref<64xf32>) {\n"
        "  train.binary_cross_entropy_grad input_x(%x : memref<64xf32>) input_y(%y : memref<64xf32>)\n"
        "      dloss(%d : memref<1xf32>) -> dx(%dx : memref<64xf32>)\n"
        "  func.return\n}\n",
        "f.mlir",
    )
    result = subprocess.run(
        [BIN / "npugrad-opt", mlir, "--target", path, "--report"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "// report of @f on my-npu (4 cores)" in result.stdout
    assert "//   vec: " in result.stdout


# -- malformed files ---------------------------------------------------------------------------

MALFORMED = [
    # (what, edit of USER, the field the message names, a piece of the message)
    ("missing field", lambda s: s.replace("cores = 4\n", ""), "'cores'", "missing field 'cores'"),
    (
        "missing level field",
        lambda s: s.replace('unit = "vector"\n', ""),
        "'unit'",
        "level 'vec': missing field 'unit'",
    ),
    ("wrong type", lambda s: s.replace("cores = 4", 'cores = "four"'), "'cores'", "must be an integer"),
    (
        "wrong type of a bool",
        lambda s: s.replace("double_buffer = true", "double_buffer = 1"),
        "'double_buffer'",
        "must be a boolean, got 1",
    ),
    (
        "capacity of the wrong type",
        lambda s: s.replace("capacity = 65536", "capacity = 1.5"),
        "'capacity'",
        "must be an integer or a string, got 1.5",
    ),
    ("bad size string", lambda s: s.replace('"1MiB"', '"1 megabyte"'), "'capacity'", "must be a size in bytes"),
    ("zero size", lambda s: s.replace('"1MiB"', '"0KiB"'), "'capacity'", "must be positive"),
    (
        "alignment not a power of two",
        lambda s: s.replace("alignment = 64", "alignment = 48"),
        "'alignment'",
        "power of two, got 48",
    ),
    ("unknown unit", lambda s: s.replace('unit = "vector"', 'unit = "gpu"'), "'unit'", "must be one of"),
    (
        "unknown role",
        lambda s: s.replace('vector = "vec"', 'vector = "vec"\nvectr = "vec"'),
        "'vectr'",
        "unknown role 'vectr'",
    ),
    ("missing role", lambda s: s.replace('accumulator = "vec"\n', ""), "'accumulator'", "[roles] needs 'accumulator'"),
    (
        "role naming the global level",
        lambda s: s.replace('vector = "vec"', 'vector = "hbm"'),
        "vector = 'hbm'",
        "must name a local level (stage, vec)",
    ),
    (
        "role naming no level",
        lambda s: s.replace('vector = "vec"', 'vector = "l9"'),
        "vector = 'l9'",
        "must name a local level",
    ),
    ("duplicate level", lambda s: s.replace('name = "vec"', 'name = "stage"'), "'stage'", "defined twice"),
    (
        "two global levels",
        lambda s: s.replace('name = "stage"\ncapacity = "1MiB"', 'name = "stage"\nkind = "global"\ncapacity = "1MiB"'),
        'kind = "global"',
        "exactly one level",
    ),
    (
        "no global level",
        lambda s: s.replace('[[level]]\nname = "hbm"\nkind = "global"\n\n', ""),
        'kind = "global"',
        "exactly one level",
    ),
    ("unknown kind", lambda s: s.replace('kind = "global"', 'kind = "remote"'), "'kind'", "'global' or 'local'"),
    (
        "level name not an identifier",
        lambda s: s.replace('name = "vec"', 'name = "v-ec"'),
        "'name'",
        "must be an identifier",
    ),
    ("unknown parent", lambda s: s.replace('parent = "stage"', 'parent = "l2"'), "parent 'l2'", "which is not a level"),
    ("parent cycle", lambda s: s.replace('parent = "hbm"', 'parent = "vec"'), "'parent'", "cycle"),
    ("unknown field", lambda s: s.replace("cores = 4", "cores = 4\nclock = 3"), "clock", "unknown field"),
    (
        "unknown level field",
        lambda s: s.replace("alignment = 32", "alignment = 32\nbanks = 4"),
        "banks",
        "unknown field",
    ),
    (
        "levels not an array of tables",
        lambda s: "level = 3\n" + s.split("[[level]]")[0],
        "'level'",
        "must be an array of tables",
    ),
    (
        "bad vector width",
        lambda s: s.replace("vector_bits = 512", "vector_bits = 100"),
        "'vector_bits'",
        "power of two",
    ),
    # A multiple of 32 all the same: 12 lanes' transposing pack gave wrong FLCE gradients.
    ("vector width no power of two", lambda s: s.replace("vector_bits = 512", "vector_bits = 384"), "'vector_bits'",
     "must be a power of two from 32 to 16384, got 384"),
    # A width of 3 lanes passed, then vectorize-contractions built a vector.shuffle the verifier
    # rejected (its transposes halve the lanes); 2^20 bits, or 1024 registers, compiled for minutes.
    ("vector width not a power of two", lambda s: s.replace("vector_bits = 512", "vector_bits = 96"),
     "'vector_bits'", "must be a power of two from 32 to 16384, got 96"),
    ("vector width too large", lambda s: s.replace("vector_bits = 512", "vector_bits = 1048576"),
     "'vector_bits'", "must be a power of two from 32 to 16384, got 1048576"),
    ("too many vector registers", lambda s: s.replace("vector_registers = 8", "vector_registers = 100000000"),
     "'vector_registers'", "must be from 0 to 64, got 100000000"),
    ("negative vector registers", lambda s: s.replace("vector_registers = 8", "vector_registers = -1"),
     "'vector_registers'", "must be from 0 to 64, got -1"),
    # These were ignored on the global level (an invalid unit too), as if they described it.
    *((f"{field} on the global level", (lambda line: lambda s: s.replace('kind = "global"', f'kind = "global"\n{line}'))(line),
       f"'{field}'", "is for local levels only")
      for field, line in (("capacity", 'capacity = "1MiB"'), ("alignment", "alignment = 64"), ("unit", 'unit = "gpu"'),
                          ("parent", 'parent = "vec"'))),
    # An empty name was taken: the report, the cache key and every error then named target ''.
    *((f"name {name!r}", (lambda name: lambda s: s.replace('name = "my-npu"', f'name = "{name}"'))(name), "'name'",
       "must not be empty") for name in ("", "  ")),
    ("no cores", lambda s: s.replace("cores = 4", "cores = 0"), "'cores'", "from 1 to 65536, got 0"),
    # The cost model and the report follow every core (a million took 40 s): a bound, not a hang.
    ("too many cores", lambda s: s.replace("cores = 4", "cores = 100000000"), "'cores'", "from 1 to 65536, got 100000000"),
    ("negative clock", lambda s: s.replace("cores = 4", "cores = 4\nclock_ghz = -1"), "'clock_ghz'", "positive number"),
    (
        "unit doing unknown work",
        lambda s: s + '[[unit]]\nname = "u"\nwork = ["dance"]\nrate = {}\n',
        "'work'",
        "must list some of matrix, vector, scalar",
    ),
    (
        "rate of work the unit does not do",
        lambda s: s + '[[unit]]\nname = "u"\nwork = ["vector"]\nrate = { matrix = { f32 = 1 } }\n',
        "'matrix'",
        "which is not in its 'work'",
    ),
    (
        "path to no level",
        lambda s: s + '[[path]]\nfrom = "hbm"\nto = "l9"\nbandwidth = 4\n',
        "'to' names 'l9'",
        "which is not a level",
    ),
    ("path without bandwidth", lambda s: s + '[[path]]\nfrom = "hbm"\nto = "vec"\n', "'bandwidth'", "missing field"),
    (
        "bandwidth on a local level",
        lambda s: s.replace("alignment = 32", "alignment = 32\nbandwidth = 4"),
        "'bandwidth'",
        "global level only",
    ),
    (
        "latency on a local level",
        lambda s: s.replace("alignment = 32", "alignment = 32\nlatency = 40"),
        "'latency'",
        "global level only",
    ),
    ("feature without a sign", lambda s: s.replace("cores = 4", 'cores = 4\nllvm_features = "+avx2,avx512f"'),
     "'llvm_features'", "as +name or -name, comma-separated (\"+avx2,-avx512f\"), got 'avx512f'"),
    ("negative latency", lambda s: s.replace('kind = "global"', 'kind = "global"\nlatency = -3'), "'latency'",
     "positive number"),
    # TOML's nan and inf: no comparison with 0 rejects NaN, and inf overflowed later conversions.
    *((f"{value} {field}", (lambda value, field, where: lambda s: s.replace(where, f"{where}\n{field} = {value}"))(
        value, field, where), f"'{field}'", f"must be a finite positive number, got {value}")
      for value in ("nan", "inf") for field, where in (("latency", 'kind = "global"'), ("bandwidth", 'kind = "global"'),
                                                       ("clock_ghz", "cores = 4"))),
    # The micro-kernel's register block: MR x NR accumulators, NR vectors of B and a broadcast.
    ("register block over the registers", lambda s: s.replace("cores = 4", "cores = 4\nregister_block = [4, 2]"),
     "'register_block'", "= [4, 2] needs 11 vector registers"),
    *((f"register block {value}", (lambda value: lambda s: s.replace("cores = 4", f"cores = 4\nregister_block = {value}"))(
        value), "'register_block'", "must be two positive integers [MR, NR]")
      for value in ("[4]", "[0, 2]", "[2, -1]", "[1.5, 2]", '"6x4"', "[true, 1]", "[1, 1, 1]")),
    ("register block without registers",
     lambda s: s.replace("vector_registers = 8", "vector_registers = 0\nregister_block = [1, 1]"),
     "'register_block'", "needs 'vector_registers'"),
    ("nan rate", lambda s: s + '[[unit]]\nname = "u"\nwork = ["vector"]\nrate = { vector = { f32 = nan } }\n',
     "'f32'", "must be a finite positive number, got nan"),
    ("inf overhead", lambda s: s + '[[unit]]\nname = "u"\nwork = ["vector"]\nrate = { vector = { f32 = 1 } }\n'
     'overhead = inf\n', "'overhead'", "must be a finite number >= 0, got inf"),
    ("nan path latency", lambda s: s + '[[path]]\nfrom = "hbm"\nto = "vec"\nbandwidth = 4\nlatency = nan\n',
     "'latency'", "must be a finite number >= 0, got nan"),
]


@pytest.mark.parametrize("what, edit, field, message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_file(tmp_path, what, edit, field, message):
    text = edit(USER)
    assert text != USER, "the edit did not apply"
    path = write(tmp_path, text)
    with pytest.raises(TargetError) as e:
        load(path)
    assert str(path) in str(e.value)
    assert field in str(e.value)
    assert message in str(e.value)


def test_invalid_toml(tmp_path):
    path = write(tmp_path, USER.replace('name = "my-npu"', "name = my-npu"))
    with pytest.raises(TargetError, match=r"not valid TOML") as e:
        load(path)
    assert str(path) in str(e.value)


def test_not_utf8(tmp_path):
    path = tmp_path / "t.toml"
    path.write_bytes(b'name = "\xff"\n')
    with pytest.raises(TargetError, match=r"not UTF-8") as e:
        load(path)
    assert str(path) in str(e.value)


def test_unreadable_file(tmp_path):
    # A directory cannot be read as a file, even by root (whom file permissions do not stop).
    with pytest.raises(TargetError, match=r"cannot read target file .*: Is a directory"):
        get(str(tmp_path))
    with pytest.raises(TargetError, match=r"cannot read target file .*missing.toml"):
        load(tmp_path / "missing.toml")


def test_unknown_target_name():
    with pytest.raises(
        TargetError, match=r"unknown target 'npu-z9': neither a shipped target \(host, npu-a2\) nor a file"
    ):
        get("npu-z9")


def test_a_path_names_a_file_not_a_shipped_target(tmp_path):
    path = write(tmp_path, USER, "npu-a2.toml")
    assert get(str(path)).name == "my-npu"
    # Not taken for a shipped name either (the shipped folder joined with an absolute path is
    # that path: this found tmp_path/npu-a2.toml).
    with pytest.raises(TargetError, match="unknown target"):
        get(str(tmp_path / "npu-a2"))


def test_from_dict_names_its_source():
    with pytest.raises(TargetError, match=r"^<dict>: missing field 'name'"):
        from_dict({})


def test_driver_reports_a_malformed_target(tmp_path):
    bad = write(tmp_path, USER.replace("alignment = 64", "alignment = 48"), "bad.toml")
    mlir = write(tmp_path, "func.func @f() {\n  func.return\n}\n", "f.mlir")
    result = subprocess.run(
        [BIN / "npugrad-opt", mlir, "--target", bad, "--stage", "tiled"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == (
        f"npugrad-opt: error: {bad}: level 'stage': field 'alignment' must be a power of two, got 48"
    )
    assert result.stdout == ""


@pytest.mark.parametrize("field, value, says", [
    ("llvm_cpu", "notacpu", "field 'llvm_cpu': LLVM {} knows no processor 'notacpu'"),
    ("llvm_features", "+avx2,+nofeature", "field 'llvm_features': LLVM {} knows no feature '+nofeature'"),
])
def test_a_cpu_llvm_does_not_know_is_a_diagnostic_at_the_asm_stage(tmp_path, field, value, says):
    """LLVM warns of an unknown CPU name and goes on to abort the process in code generation:
    npugrad-opt reads the warning and says which field of which file, exit 1."""
    from npugrad.lowering.machine_code import llvm_version

    cpu = write(tmp_path, USER.replace("cores = 4", f'cores = 4\n{field} = "{value}"'), "cpu.toml")
    mlir = Path(__file__).resolve().parent.parent / "examples" / "bce_grad.mlir"
    result = subprocess.run([BIN / "npugrad-opt", mlir, "--cpu", cpu, "--stage", "asm"], capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip() == f"{mlir}: error: {cpu}: {says.format(llvm_version())}", result.stderr


# -- calibration -------------------------------------------------------------------------------


def test_calibrated_file_is_a_target(tmp_path):
    from npugrad.tools.calibrate import target_file

    hz = host().clock_ghz * 1e9
    figures = {"gemm_flops": 64 * hz, "vector_ops": 16 * hz, "copy": {lv.name: 8 * hz for lv in host().levels}}
    t = load(write(tmp_path, target_file(figures, 12 * hz)))
    assert t.name == "host-measured" and t.levels[1:] == host().levels[1:] and t.roles == host().roles
    assert t.unit_for("matrix").rate("matrix", "f32") == 64
    assert t.global_level.bandwidth == 12
    assert t.global_level.latency == pytest.approx(host().global_level.latency, rel=1e-3)  # kept: not measured
    assert t.path("dram", "l2").bandwidth == 8


def test_calibrate_command(tmp_path):
    out = tmp_path / "measured.toml"
    result = subprocess.run([BIN / "npugrad", "calibrate", "-o", out, "--seconds", "0.01"], capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    t = load(out)
    assert t.unit_for("matrix").rate("matrix", "f32") > 0 and t.global_level.bandwidth > 0
