// The bfloat16 FLCE gradient and forward compiled for a CPU with AVX512-BF16 (vdpbf16ps), run on
// any machine: NPUGRAD_EMULATE=avx512bf16 replaces the instruction, where this CPU lacks it, by
// generic code computing what it does (lowering/emulation.py); where the CPU has it, it runs it.
// Checked against the NumPy reference like every run test.
// RUN: env NPUGRAD_EMULATE=avx512bf16 npugrad-opt %examples/flce_grad.mlir --stage run --seed 3 --cpu %inputs/avx512bf16.toml | FileCheck %s
// RUN: env NPUGRAD_EMULATE=avx512bf16 npugrad-opt %examples/flce_forward.mlir --stage run --seed 3 --cpu %inputs/avx512bf16.toml | FileCheck %s --check-prefix=FWD
// The code really holds the dot products (what the emulation stands in for):
// RUN: npugrad-opt %examples/flce_grad.mlir --stage llvm-ir --cpu %inputs/avx512bf16.toml | FileCheck %s --check-prefix=IR
// An unknown feature is a diagnostic, not a traceback:
// RUN: env NPUGRAD_EMULATE=avx512bf16,amx-bf16 not npugrad-opt %examples/flce_grad.mlir --stage run 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK: @flce_grad: compiled in {{.*}} ms, ran in {{.*}} ms
// CHECK: input_grad_out {{ *}}(16, 32) {{ *}}bfloat16 {{.*}} ok
// CHECK: weight_grad_out {{ *}}(256, 32) {{ *}}bfloat16 {{.*}} ok

// FWD: @flce_forward: compiled in {{.*}} ms, ran in {{.*}} ms
// FWD: logits_max_local_out {{.*}} ok
// FWD: sum_exp_logits_local_out {{.*}} ok
// FWD: predicted_logits_local_out {{.*}} ok

// IR: call <16 x float> @llvm.x86.avx512bf16.dpbf16ps.512(<16 x float> %{{.*}}, <32 x bfloat> %{{.*}}, <32 x bfloat> %{{.*}})

// BAD: error: NPUGRAD_EMULATE: no emulation of amx-bf16 (emulated: avx512bf16)
// BAD-NOT: Traceback
