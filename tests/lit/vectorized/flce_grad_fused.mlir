// The vectorized stage of the fused linear cross-entropy gradient: no contraction is left as a
// linalg.generic; each is a register-blocked micro-kernel of vector FMAs (see
// tests/lit/passes/vectorize-contractions.mlir for the kernel itself).
// RUN: npugrad-opt %examples/flce_grad_fused.mlir --stage vectorized --cpu %inputs/avx512.toml | FileCheck %s --check-prefix=STAGE

// STAGE-LABEL: func.func @flce
// STAGE-NOT:     linalg.generic
// STAGE:         math.exp
// STAGE:         vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<{{[0-9]+}}xf32>
// STAGE-NOT:     linalg.generic
