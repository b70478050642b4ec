// Host assembly after llvmlite's O3: the BCE loop is vectorised.
// RUN: npugrad-opt %examples/bce_grad.mlir --stage asm | FileCheck %s

// CHECK: _mlir_ciface_bce_grad:
// CHECK: {{vmaxps|vcmp|vdivps}}
