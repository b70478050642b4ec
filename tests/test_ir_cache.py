"""The disk cache of the passes' result (runtime/ir_cache.py): an op lowered once is read back, not
lowered, by the next compile of the same op with the same pipeline and the same npugrad, in this
process or another, and runs the same; another pipeline, another npugrad, a damaged entry or an
observer that wants to see the passes each cost a lowering. (Another process reading both the
IR and the machine code: test_object_cache.py::test_another_process_loads_an_op_kernel.)"""

from __future__ import annotations

import zlib

import pytest

from npugrad.compiler import Pipeline
from npugrad.dialect.train import BinaryCrossEntropyGradOp
from npugrad.runtime import ir_cache, object_cache, specialize
from npugrad.runtime.specialize import OperandClass, build_module

OPERANDS = {n: OperandClass("float32", (None,), False) for n in ("input_x", "input_y", "dloss", "dx")}


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("NPUGRAD_CACHE_DIR", str(d))
    return d


def _lower(pipeline: Pipeline, props=None) -> tuple[str, dict[str, bool], bool]:
    module = build_module(BinaryCrossEntropyGradOp, OPERANDS, props or {"reduction": 1})
    module.verify()
    return specialize._lowered(module, pipeline, pipeline.key())


def _ll(d) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith(".ll")) if d.exists() else []


def test_the_second_lowering_reads_what_the_first_kept(cache_dir):
    pipeline = Pipeline(distribute=True, verify_each=False)
    ir, blocks, from_disk = _lower(pipeline)
    assert not from_disk and len(_ll(cache_dir)) == 1 and "define" in ir
    again = _lower(pipeline)
    assert again == (ir, blocks, True)
    assert blocks and all(isinstance(v, bool) for v in blocks.values())  # distributed: a block kernel


@pytest.mark.parametrize("change", ["attribute", "pipeline", "verification", "npugrad"])
def test_what_decides_the_ir_is_in_the_key(cache_dir, monkeypatch, change):
    pipeline = Pipeline(distribute=True, verify_each=False)
    _lower(pipeline)
    props = {"reduction": 1}
    if change == "attribute":
        props = {"reduction": 2}
    elif change == "pipeline":
        pipeline = Pipeline(distribute=False, verify_each=False)
    elif change == "verification":  # an entry made verifying after every pass vouches for that
        pipeline = Pipeline(distribute=True, verify_each=True)
    else:
        monkeypatch.setattr(ir_cache, "producer", lambda: b"another npugrad")
    assert not _lower(pipeline, props)[2] and len(_ll(cache_dir)) == 2


def test_the_digest_covers_every_file_but_bytecode(tmp_path):
    (tmp_path / "passes").mkdir()
    (tmp_path / "passes" / "a.py").write_text("x = 1\n")
    (tmp_path / "target.toml").write_text("cores = 2\n")
    before = ir_cache.tree_digest(str(tmp_path))
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "a.cpython-311.pyc").write_bytes(b"\0\1")
    assert ir_cache.tree_digest(str(tmp_path)) == before
    (tmp_path / "passes" / "a.py").write_text("x = 2\n")
    edited = ir_cache.tree_digest(str(tmp_path))
    assert edited != before
    (tmp_path / "passes" / "a.py").rename(tmp_path / "passes" / "b.py")  # a renamed file too
    assert ir_cache.tree_digest(str(tmp_path)) not in (before, edited)


@pytest.mark.parametrize("damage", ["truncated", "flipped", "not zlib", "not json", "not utf-8"])
def test_a_damaged_entry_is_lowered_again_and_rewritten(cache_dir, damage):
    pipeline = Pipeline(distribute=False, verify_each=False)
    first = _lower(pipeline)
    [name] = _ll(cache_dir)
    path = cache_dir / name
    data = path.read_bytes()
    magic = len(object_cache.FORMAT)  # an entry: the magic line, SHA-256 of the body, the body
    assert zlib.decompress(data[magic + 32:]).endswith(first[0].encode())  # the IR, compressed
    if damage in ("truncated", "flipped"):
        path.write_bytes(data[: len(data) // 2] if damage == "truncated" else data[:-1] + bytes([data[-1] ^ 1]))
    else:  # entries whole to the object cache, wrong inside
        body = {"not zlib": b"{}\n" + first[0].encode(), "not json": zlib.compress(b"[1]\n" + first[0].encode()),
                "not utf-8": zlib.compress(b"{}\n\xff\xfe")}[damage]
        path.write_bytes(data[:magic] + object_cache.digest(name[:-len(ir_cache.SUFFIX)], ir_cache.SUFFIX, body) + body)
    again = _lower(pipeline)
    assert again == (*first[:2], False)
    assert path.read_bytes() == data and _lower(pipeline)[2]


def test_an_observer_sees_the_passes_run(cache_dir):
    steps = []
    quiet = Pipeline(distribute=False, verify_each=False)
    _lower(quiet)
    watched = Pipeline(distribute=False, verify_each=False, observer=lambda step, _m, _t: steps.append(step))
    assert not _lower(watched)[2] and "convert-train-to-loops" in steps


def test_off_keeps_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("NPUGRAD_CACHE_DIR", "off")
    monkeypatch.chdir(tmp_path)
    pipeline = Pipeline(distribute=False, verify_each=False)
    assert not _lower(pipeline)[2] and not _lower(pipeline)[2]
    assert list(tmp_path.iterdir()) == []


def test_an_entry_whose_ir_llvmlite_rejects_costs_a_compile(cache_dir, rng):
    """An entry whole to the cache (its digest holds) whose IR llvmlite rejects, as a writer's bug
    would leave it: the kernel is lowered again and runs, where the call raised JitError."""
    import numpy as np

    from npugrad import ops

    x = np.full(64, 0.25, np.float32)
    ops.binary_cross_entropy_grad(x, x, np.ones(1, np.float32))
    for name in _ll(cache_dir):
        path = cache_dir / name
        data = path.read_bytes()
        magic = len(object_cache.FORMAT)
        head, _, ir = zlib.decompress(data[magic + 32:]).partition(b"\n")
        body = zlib.compress(head + b"\n" + ir.replace(b"define ", b"define garbage ", 1))
        path.write_bytes(data[:magic] + object_cache.digest(name[:-len(ir_cache.SUFFIX)], ir_cache.SUFFIX, body) + body)
    specialize._CACHE.clear()
    from npugrad.runtime import launch

    launch._REPLAYS.clear()
    launch._SPECIALISED.clear()
    y = rng.uniform(0.1, 0.9, 64).astype(np.float32)
    got = ops.binary_cross_entropy_grad(x, y, np.ones(1, np.float32))
    np.testing.assert_allclose(got, (x - y) / (x * (1 - x)) / 64, rtol=1e-5)


def test_an_entry_that_is_not_a_regular_file_is_passed_over(cache_dir):
    """A FIFO in an entry's place: opening it to read would wait for a writer forever."""
    import os

    cache_dir.mkdir()
    fifo = cache_dir / ("f" * 64 + ".o")
    os.mkfifo(fifo)
    assert object_cache.load("f" * 64) is None
