// The bfloat16 linear cross-entropy gradient on a CPU with AVX512-BF16 (Inputs/avx512bf16.toml,
// whatever machine prints it): the three GEMMs run on vdpbf16ps, two reduction steps per
// instruction into float32 accumulators, 24 to a 6x4 block, and none of them on float32 FMAs
// (exp's are the only ones, and its scalar tail's). The same program for a CPU without it (avx512.toml) widens the
// bfloat16 operands and runs the blocks on float32 FMAs, with no vdpbf16ps.
// RUN: npugrad-opt %examples/flce_grad_4096x4096x8192.mlir --stage asm --cpu %inputs/avx512bf16.toml | FileCheck %s
// RUN: npugrad-opt %examples/flce_grad_4096x4096x8192.mlir --stage asm --cpu %inputs/avx512.toml | FileCheck %s --check-prefix=FMA

// GEMM 1, then G's exp, then GEMMs 2 and 3.
// CHECK-LABEL: {{^}}flce:
// CHECK-NOT:       vfmadd
// CHECK-COUNT-24:  vdpbf16ps {{.*}}%zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK-NOT:       vfmadd{{.*}}zmm
// CHECK:           {{vrndscaleps|vroundps}}
// CHECK:           vroundss
// CHECK-NOT:       vfmadd{{.*}}zmm
// CHECK-COUNT-24:  vdpbf16ps {{.*}}%zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK:           prefetch
// CHECK-COUNT-24:  vdpbf16ps {{.*}}%zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK-NOT:       vfmadd{{.*}}zmm
// CHECK-LABEL: {{^}}_mlir_ciface_flce:

// FMA-LABEL: {{^}}flce:
// FMA-NOT:         vdpbf16ps
// FMA-COUNT-24:    vfmadd{{[0-9]+}}ps {{.*}}%zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// FMA-NOT:         vdpbf16ps
// FMA-LABEL: {{^}}_mlir_ciface_flce:
