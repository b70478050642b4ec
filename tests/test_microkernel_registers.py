"""The micro-kernels' reduction loops keep all they use in registers: no operand off the stack in
any of the FLCE kernel's FMA loops, compiled for a Zen 3 (tests/lit/Inputs/zen3.toml: LLVM's
znver3 tuning, 16 ymm registers, 2 cores), nor in its bfloat16 dot-product loops compiled for
an AVX512-BF16 CPU (Inputs/avx512bf16.toml), whatever machine runs the test.

Register allocation runs over the whole kernel, one function, so what the rest of the nest keeps
live decides whether a reduction loop's bound stays in a register. Emitting the row-tail block
after the whole blocks instead of before left GEMM 2's loop comparing against a stack slot on
every step, and that loop took 10 % more samples (perf, Zen 3; bench/loop_profile.py shows the
stack operands per loop). The loops are found in the assembly as backward branches; a
reduction loop is one with at least 12 multiply-adds (FMAs or vdpbf16ps) and at most two
instructions per multiply-add (the masked column tails, which load B lane by lane, have more
and run only on the last columns)."""

from __future__ import annotations

import functools
import os
import sys

import pytest

from npugrad.compiler import Pipeline
from npugrad.dialect import FusedLinearCrossEntropyLossGradOp
from npugrad.runtime.specialize import OperandClass, build_module

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench import loop_profile

ZEN3 = os.path.join(ROOT, "tests", "lit", "Inputs", "zen3.toml")
AVX512BF16 = os.path.join(ROOT, "tests", "lit", "Inputs", "avx512bf16.toml")


def reduction_loops(asm: str) -> list[tuple[int, int, int]]:
    """(FMAs, instructions, stack operands) of every loop of at least 12 FMAs and at most two
    instructions per FMA (bench/loop_profile.py finds the loops: backward branches)."""
    found = loop_profile.loops(loop_profile.assembly_instructions(asm))
    return [(lp.fmas, len(lp.instructions), lp.stack) for lp in found
            if lp.fmas >= 12 and len(lp.instructions) <= 2 * lp.fmas]


@pytest.mark.parametrize(("cpu", "dtype"), [(ZEN3, "float32"), (ZEN3, "bfloat16"), (AVX512BF16, "bfloat16")],
                         ids=["zen3-float32", "zen3-bfloat16", "avx512bf16-bfloat16"])
def test_flce_reduction_loops_take_no_operand_off_the_stack(cpu, dtype):
    """The kernel the API compiles for arrays of any shape (dynamic, C-contiguous). On a CPU with
    AVX512-BF16 the bfloat16 loops are vdpbf16ps pair loops, A's pairs read in place."""
    loops = reduction_loops(flce_assembly(cpu, dtype))
    # GEMMs 1, 2 and 3: float32 FMAs in whole blocks and row tails; pairs in one loop of blocks
    # over all rows (not unrolled, so no whole block apart from the tail's), GEMMs 1 and 2 with
    # a loop for an odd count's last step (A read in place), at least.
    assert len(loops) >= (5 if cpu == AVX512BF16 else 6), loops
    assert all(stack == 0 for _, _, stack in loops), loops


@functools.cache
def flce_assembly(cpu: str, dtype: str) -> str:
    """The assembly of the FLCE gradient kernel the API compiles for arrays of any shape."""
    vectors = {"grad": "float32", "target_mask": "bool", "masked_target": "int64", "logits_max": "float32",
               "sum_exp_logits": "float32"}
    classes = {name: OperandClass(vectors[name], (None,), False) if name in vectors
               else OperandClass(dtype, (None, None), False)
               for name in FusedLinearCrossEntropyLossGradOp.operand_names()
               if name not in ("softmax", "softmax_block_max")}  # memory-saving mode
    return Pipeline(cpu=cpu).lower(build_module(FusedLinearCrossEntropyLossGradOp, classes, {}), "asm")


def test_whole_blocks_unrolled_by_two_and_tails_rolled():
    """LLVM unrolls only the loops npugrad annotates (lowering/machine_code.py): the whole
    blocks' float32 reduction loops by two, whatever the vector width (two steps of 6 x 2 ymm
    vectors, 24 FMAs, on Zen 3; of 6 x 4 zmm vectors, 48, with AVX-512), the row tails rolled
    (one step: 12 and 24 FMAs)."""
    zen3 = sorted(fmas for fmas, _, _ in reduction_loops(flce_assembly(ZEN3, "float32")))
    assert set(zen3) == {12, 24} and zen3.count(24) >= 3, zen3  # GEMMs 1, 2 and 3's whole blocks
    avx512 = sorted(fmas for fmas, _, _ in reduction_loops(flce_assembly(AVX512BF16, "float32")))
    assert set(avx512) == {24, 48} and avx512.count(48) >= 3, avx512


def test_a_reload_in_a_loop_is_found():
    asm = "\n".join([".LBB0_1:", *["\tvfmadd231ps\t%ymm1, %ymm2, %ymm3"] * 12, "\tcmpq\t%rdx, 1112(%rsp)",
                     "\tjne\t.LBB0_1", ".LBB0_2:", "\tvfmadd231ps\t%ymm1, %ymm2, %ymm3", "\tjne\t.LBB0_2"])
    assert reduction_loops(asm) == [(12, 14, 1)]
