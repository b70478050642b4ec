"""The micro-kernels' reduction loops keep all they use in registers: no operand off the stack in
any of the FLCE kernel's FMA loops, compiled for a Zen 3 (tests/lit/Inputs/zen3.toml: LLVM's
znver3 tuning, 16 ymm registers, 2 cores) whatever machine runs the test.

Register allocation runs over the whole kernel, one function, so what the rest of the nest keeps
live decides whether a reduction loop's bound stays in a register. Emitting the row-tail block
after the whole blocks instead of before left GEMM 2's loop comparing against a stack slot on
every step, and that loop took 10 % more samples (perf, Zen 3; bench/loop_profile.py shows the
stack operands per loop). The loops are found in the assembly as backward branches; a
reduction loop is one with at least 12 FMAs and at most two instructions per FMA (the masked
column tails, which load B lane by lane, have more and run only on the last columns)."""

from __future__ import annotations

import os
import re

import pytest
from xdsl.parser import Parser

from npugrad.compiler import Pipeline, make_context

ZEN3 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lit", "Inputs", "zen3.toml")

FLCE = """
func.func @flce(%grad: memref<?xf32>, %x: memref<?x?x{t}>, %w: memref<?x?x{t}>, %mask: memref<?xi1>,
                %target: memref<?xi64>, %max: memref<?xf32>, %sum: memref<?xf32>,
                %dx: memref<?x?x{t}>, %dw: memref<?x?x{t}>) {{
  train.fused_linear_cross_entropy_loss_grad grad(%grad : memref<?xf32>) input(%x : memref<?x?x{t}>)
      weight(%w : memref<?x?x{t}>) target_mask(%mask : memref<?xi1>) masked_target(%target : memref<?xi64>)
      logits_max(%max : memref<?xf32>) sum_exp_logits(%sum : memref<?xf32>)
      -> input_grad_out(%dx : memref<?x?x{t}>) weight_grad_out(%dw : memref<?x?x{t}>)
  func.return
}}
"""


def reduction_loops(asm: str) -> list[tuple[int, int, int]]:
    """(FMAs, instructions, stack operands) of every loop of at least 12 FMAs and at most two
    instructions per FMA: a backward branch to a label, and the instructions from it."""
    labels: dict[str, int] = {}
    code: list[str] = []
    for line in asm.splitlines():
        if m := re.match(r"^(\.LBB\S+):", line):
            labels[m.group(1)] = len(code)
        elif line.startswith("\t") and (text := line.strip()) and not text.startswith((".", "#")):
            code.append(text)
    found = []
    for at, text in enumerate(code):
        m = re.match(r"^j\w+\s+(\.LBB\S+)", text)
        if m and labels.get(m.group(1), at + 1) <= at:
            body = code[labels[m.group(1)]:at + 1]
            fmas = sum(t.startswith("vfmadd") for t in body)
            if fmas >= 12 and len(body) <= 2 * fmas:
                found.append((fmas, len(body), sum("%rsp" in t or "%rbp" in t for t in body)))
    return found


@pytest.mark.parametrize("element", ["f32", "bf16"])
def test_flce_reduction_loops_take_no_operand_off_the_stack(element):
    module = Parser(make_context(), FLCE.format(t=element)).parse_module()
    asm = Pipeline(cpu=ZEN3).lower(module, "asm")
    loops = reduction_loops(asm)
    assert len(loops) >= 6, loops  # GEMMs 1, 2 and 3: whole blocks and row tails, at least
    assert all(stack == 0 for _, _, stack in loops), loops


def test_a_reload_in_a_loop_is_found():
    asm = "\n".join([".LBB0_1:", *["\tvfmadd231ps\t%ymm1, %ymm2, %ymm3"] * 12, "\tcmpq\t%rdx, 1112(%rsp)",
                     "\tjne\t.LBB0_1", ".LBB0_2:", "\tvfmadd231ps\t%ymm1, %ymm2, %ymm3", "\tjne\t.LBB0_2"])
    assert reduction_loops(asm) == [(12, 14, 1)]
