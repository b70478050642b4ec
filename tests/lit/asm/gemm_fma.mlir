// Host assembly of the fused linear cross-entropy gradient: the GEMM micro-kernels of
// vectorize-contractions run on 512-bit registers. The 6x4 block's inner loop is 24 FMAs
// (llvmlite may unroll it), and no contraction is left to narrower or scalar FMAs.
// RUN: npugrad-opt %examples/flce_grad_fused.mlir --stage asm --cpu %inputs/avx512.toml | FileCheck %s

// GEMM 1; then G's exp (lowering/vector_math.py: FMAs after the rounding of n, narrower ones in
// the loop's tail, the last a scalar vroundss); then GEMMs 2 and 3, whose 48 columns (H) are all
// at the masked edges, a 16-lane vector at a time: each a loop of 6-row blocks, a block starting
// with the prefetches of its C lines (into the L2: prefetcht1, c_prefetch), 6 FMAs a step. Only
// exp has narrower FMAs.
// CHECK-LABEL: {{^}}flce:
// CHECK-NOT:       vfmadd{{.*}}{{xmm|ymm}}
// CHECK-COUNT-24:  vfmadd{{[0-9]+}}ps {{.*}}%zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK-NOT:       vfmadd{{.*}}{{xmm|ymm}}
// CHECK:           {{vrndscaleps|vroundps}}
// CHECK:           vroundss
// CHECK-COUNT-6:   prefetcht1
// CHECK-NOT:       vfmadd{{.*}}{{xmm|ymm}}
// CHECK-COUNT-6:   vfmadd{{[0-9]+}}ps {{.*}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK-NOT:       vfmadd{{.*}}{{xmm|ymm}}
// CHECK-COUNT-6:   prefetcht1
// CHECK-NOT:       vfmadd{{.*}}{{xmm|ymm}}
// CHECK-COUNT-6:   vfmadd{{[0-9]+}}ps {{.*}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK-NOT:       vfmadd
// CHECK-LABEL: {{^}}_mlir_ciface_flce:
