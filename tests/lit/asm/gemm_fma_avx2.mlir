// The same GEMM micro-kernels shaped for an AVX2-class CPU (16 registers of 256 bits, no
// AVX-512), whatever machine prints them: a 6x2 block of ymm accumulators, so the inner loop is
// 12 FMAs on ymm registers, and nothing uses a zmm register the CPU does not have.
// RUN: npugrad-opt %examples/flce_grad_fused.mlir --stage asm --cpu %inputs/avx2.toml | FileCheck %s

// CHECK-LABEL: {{^}}flce:
// CHECK-NOT:       zmm
// CHECK-COUNT-12:  vfmadd{{[0-9]+}}ps {{.*}}%ymm{{[0-9]+}}, %ymm{{[0-9]+}}, %ymm{{[0-9]+}}
// CHECK-NOT:       zmm
// CHECK-LABEL: {{^}}_mlir_ciface_flce:
