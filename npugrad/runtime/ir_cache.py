"""The npugrad passes' result kept on disk across processes, beside the machine code
(object_cache.py, same directory, same entry format): the LLVM IR an op specialisation lowers to
and which of its functions run as blocks, zlib-compressed (level 1: the IR is text, 80 KB on
average over the test suite's 1400 kernels and up to 730 KB, about 6x smaller in a few ms, read
back in about 3; the machine code beside it averages 12 KB). The key is what decides them:

- the op as built (its IR: op, operand types and layouts, attribute values);
- the pipeline's key (its passes and their options, the target and CPU descriptions);
- what ran the passes: a digest of npugrad's own files and the versions of xDSL, the MLIR
  bindings, llvmlite, NumPy, ml_dtypes and Python.

A process that compiles an op another process compiled before then skips the npugrad passes
and the upstream lowering as well as LLVM (the machine code comes from the object cache): a
fresh interpreter's first FLCE call no longer pays for passes it ran before. Any edit to
npugrad's source changes the digest, so a changed pass misses. A pipeline that reports its
steps (an observer) always runs them. NPUGRAD_CACHE_DIR=off turns this cache off with the other.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import zlib
from functools import cache
from importlib import metadata

from npugrad.runtime import object_cache

FORMAT = b"npugrad-ir-cache-2\n"  # bump when what an entry holds changes
SUFFIX = ".ll"
_PACKAGES = ("xdsl", "torch-mlir", "llvmlite", "numpy", "ml_dtypes")


@cache
def producer() -> bytes:
    """A digest of what turns an op into LLVM IR: every file of the npugrad package (sources and
    target descriptions) and the versions of the packages the passes and lowering run on."""
    h = hashlib.sha256(sys.version.encode())
    for name in _PACKAGES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "absent"
        h.update(f"\0{name}={version}".encode())
    h.update(tree_digest(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    return h.digest()


def tree_digest(root: str) -> bytes:
    """SHA-256 over the files under `root` (their paths relative to it and their bytes), in a
    fixed order, without Python's bytecode caches."""
    h = hashlib.sha256()
    for where, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if f.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(where, f)
            h.update(b"\0" + os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as stream:
                h.update(stream.read())
    return h.digest()


def key(op_ir: str, pipeline_key: tuple) -> str:
    h = hashlib.sha256(FORMAT)
    h.update(producer())
    h.update(repr(pipeline_key).encode() + b"\0")
    h.update(op_ir.encode())
    return h.hexdigest()


def load(k: str) -> tuple[str, dict[str, bool]] | None:
    """The LLVM IR and block kernels stored under `k`, or None (absent, unreadable, damaged)."""
    data = object_cache.load(k, SUFFIX)
    if data is None:
        return None
    try:
        head, sep, ir = zlib.decompress(data).partition(b"\n")
        blocks = json.loads(head)
        text = ir.decode()
    except (zlib.error, ValueError, UnicodeDecodeError):
        return None
    if not sep or not isinstance(blocks, dict) or not all(isinstance(v, bool) for v in blocks.values()):
        return None
    return text, blocks


def store(k: str, llvm_ir: str, blocks: dict[str, bool]) -> None:
    """Keep the IR and block kernels under `k` (atomically; errors ignored)."""
    entry = json.dumps(blocks, sort_keys=True).encode() + b"\n" + llvm_ir.encode()
    object_cache.store(k, zlib.compress(entry, 1), SUFFIX)
