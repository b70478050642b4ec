// Host assembly after llvmlite's O3: the BCE loop is vectorised (vectorize-elementwise-loops):
// 16 floats per instruction in zmm registers.
// RUN: npugrad-opt %examples/bce_grad.mlir --stage asm --cpu %inputs/avx512.toml | FileCheck %s

// CHECK-LABEL: {{^}}bce_grad:
// CHECK: vmaxps{{.*}}%zmm
// CHECK: vdivps{{.*}}%zmm
// CHECK-LABEL: _mlir_ciface_bce_grad:
