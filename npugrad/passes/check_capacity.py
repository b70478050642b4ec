"""check-capacity{target=...}: prove that every local buffer fits. In each function (a kernel,
whose local buffers are all live at once) the buffers of each memory level, counted twice when
double-buffered and padded to the level's alignment, must add up to at most its capacity:

    %b = npu.alloc_local {double_buffer} : memref<64x1024xf32, #npu.mem<ub>>
    error: local buffer %b (memref<64x1024xf32, #npu.mem<ub>>, 256 KiB x 2 double-buffered = 512 KiB)
           does not fit level 'ub' of target npu-a2: 512 KiB in use there, capacity 192 KiB
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from npugrad.analysis.footprint import local_buffer_bytes as footprint
from npugrad.diagnostics import PassFailure
from npugrad.dialect.npu import AllocLocalOp, level_of
from npugrad.targets import Target, TargetError, get


def kib(n: int) -> str:
    return f"{n / 1024:g} KiB"


def level_usage(f: func.FuncOp, target: Target) -> dict[str, list[tuple[AllocLocalOp, int]]]:
    """level -> [(buffer, bytes it takes with its copies)], in program order."""
    usage: dict[str, list[tuple[AllocLocalOp, int]]] = {}
    for buf in (o for o in f.walk() if isinstance(o, AllocLocalOp)):
        try:
            size, copies = footprint(buf, target)
        except TargetError as e:  # a level the target does not have
            raise PassFailure(buf, str(e)) from None
        usage.setdefault(level_of(buf.result.type), []).append((buf, size * copies))  # type: ignore[arg-type]
    return usage


@dataclass(frozen=True)
class CheckCapacityPass(ModulePass):
    name = "check-capacity"

    target: str = "host"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        target = get(self.target)
        for f in (o for o in op.walk() if isinstance(o, func.FuncOp)):
            for level_name, buffers in level_usage(f, target).items():
                level = target.level(level_name)
                if level.is_global:
                    raise PassFailure(buffers[0][0], f"local buffer in '{level_name}', the global memory of target {target.name}")
                total = 0
                for buf, size in buffers:
                    total += size
                    if total > level.capacity:  # type: ignore[operator]
                        one, copies = footprint(buf, target)
                        how = f"{kib(one)} x 2 double-buffered = {kib(size)}" if copies == 2 else kib(size)
                        name = f"%{buf.result.name_hint}" if buf.result.name_hint else "(unnamed)"
                        raise PassFailure(
                            buf,
                            f"local buffer {name} ({buf.result.type}, {how}) does not fit level '{level_name}' of "
                            f"target {target.name}: {kib(total)} in use there, capacity {kib(level.capacity)}",  # type: ignore[arg-type]
                        )
