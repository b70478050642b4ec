"""Machine code kept on disk across processes, keyed by everything that decides it: the LLVM IR
the pipeline produced, llvmlite's and LLVM's versions, and this CPU (name and features). A
process that compiles a kernel another process compiled before (a test worker, a lit RUN line,
a benchmark's fresh interpreter) skips LLVM's O3 pipeline and code generation. The npugrad
passes' own result, the LLVM IR, is cached beside it by runtime/ir_cache.py, keyed by the op and
npugrad's source: a changed pass misses both.

    NPUGRAD_CACHE_DIR=<dir>   where (default: $XDG_CACHE_HOME/npugrad, else ~/.cache/npugrad)
    NPUGRAD_CACHE_DIR=off     no disk cache (every process compiles from its IR)
    npugrad cache [--clear]   where it is, its entries and their size (--clear: delete them)

An entry is `<key>.o`: a header (magic, SHA-256 of its name and the code) then the object code
(the passes' LLVM IR, runtime/ir_cache.py, is kept beside it as `<key>.ll`, the same way). It is
written to a temporary file and renamed into place, so readers see a whole entry or none; one
whose digest does not match (a truncated disk, a hand edit, another entry copied or linked in
its place, which would run another kernel's code) is ignored and rewritten. Any OSError
(a read-only home, a full disk) falls back to compiling, silently: the cache only saves time.
The code in the directory is run as it is found: it is created private to its user (0700), and
one shared with users you do not trust must not be named.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from functools import cache

import llvmlite
import llvmlite.binding as llvm

FORMAT = b"npugrad-object-cache-2\n"  # bump when what an entry holds changes


def directory() -> str | None:
    """The cache directory, or None when NPUGRAD_CACHE_DIR=off (or empty)."""
    configured = os.environ.get("NPUGRAD_CACHE_DIR")
    if configured is not None:
        return None if configured.strip().lower() in ("", "off", "0", "none") else configured
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "npugrad")


@cache
def _machine() -> bytes:
    """What, besides the IR, the machine code depends on (the JIT's target machine)."""
    features = llvm.get_host_cpu_features().flatten()
    parts = (llvmlite.__version__, ".".join(map(str, llvm.llvm_version_info)), llvm.get_default_triple(),
             llvm.get_host_cpu_name(), features, "O3", "jitdefault")
    return "\0".join(parts).encode()


def key(llvm_ir: str) -> str:
    h = hashlib.sha256(FORMAT)
    h.update(_machine())
    h.update(b"\0")
    h.update(llvm_ir.encode())
    return h.hexdigest()


# An entry's name is its key (64 hex digits) and one of these: machine code (here), or the LLVM
# IR the npugrad passes lowered an op to (runtime/ir_cache.py).
SUFFIXES = (".o", ".ll")


def digest(k: str, suffix: str, code: bytes) -> bytes:
    """An entry's digest: of its name as well as its code, so that the code of another entry
    (the same kernel for another dtype: the same symbols) does not pass for this one's."""
    return hashlib.sha256(f"{k}{suffix}\0".encode() + code).digest()


def _path(k: str, suffix: str) -> str | None:
    d = directory()
    return None if d is None else os.path.join(d, f"{k}{suffix}")


def load(k: str, suffix: str = ".o") -> bytes | None:
    """The object code (or other entry of `suffix`) stored under `k`, or None (absent,
    unreadable, damaged)."""
    path = _path(k, suffix)
    if path is None:
        return None
    try:  # a regular file only: opening a FIFO put there would wait for a writer forever
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            data = f.read()
    except OSError:
        return None
    header = len(FORMAT) + 32
    if len(data) <= header or not data.startswith(FORMAT):
        return None
    code = data[header:]
    if digest(k, suffix, code) != data[len(FORMAT):header]:
        return None
    return code


def store(k: str, code: bytes, suffix: str = ".o") -> None:
    """Keep `code` under `k` (atomically; errors ignored)."""
    path = _path(k, suffix)
    if path is None or not code:
        return
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(FORMAT + digest(k, suffix, code) + code)
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise
    except OSError:
        pass


def entries() -> list[str]:
    """The paths of the cache's entries (and of writes a crashed process left half done)."""
    d = directory()
    try:
        names = os.listdir(d) if d is not None else []
    except OSError:
        return []
    return [os.path.join(d, n) for n in sorted(names)
            if any(n.endswith(x) and (n.startswith(".tmp-") or len(n) == 64 + len(x)) for x in SUFFIXES)]


def clear() -> tuple[int, int, list[str]]:
    """Delete the entries (only them: the directory may be shared with other files); returns
    how many and their bytes, and why each one that could not be deleted was not."""
    count = size = 0
    failed = []
    for path in entries():
        try:
            n = os.lstat(path).st_size  # not getsize: a dangling link is an entry to delete too
            os.unlink(path)
        except FileNotFoundError:  # another process deleted it meanwhile
            continue
        except OSError as e:
            failed.append(f"{path}: {e.strerror}")
            continue
        count += 1
        size += n
    return count, size, failed


def unreadable() -> str | None:
    """Why the cache directory cannot be listed (not a directory, no permission), or None (it
    can, or it does not exist yet: the first compile makes it)."""
    d = directory()
    if d is None or not os.path.lexists(d):
        return None
    try:
        os.listdir(d)
    except OSError as e:
        return e.strerror or str(e)
    return None
