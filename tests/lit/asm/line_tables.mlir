// --line-tables: the loops the passes label name their machine code in the line tables. Each
// GEMM's reduction loop over whole 6x4 blocks (`logits.k`, `input_grad.k`, `weight_grad.k`:
// vectorize-contractions names them after the contraction convert-train-to-loops kept as their
// location's label) is the 24 vdpbf16ps of its block, with no other line between; the softmax
// gradient and the packs have names of their own. Without the option there are no line tables.
// RUN: npugrad-opt %examples/flce_grad_4096x4096x8192.mlir --stage asm --cpu %inputs/avx512bf16.toml --line-tables | FileCheck %s
// RUN: npugrad-opt %examples/flce_grad_4096x4096x8192.mlir --stage asm --cpu %inputs/avx512bf16.toml | FileCheck %s --check-prefix=NONE

// CHECK-LABEL: {{^}}flce:
// CHECK:           .file [[LOGITS:[0-9]+]] "logits.k"
// CHECK-NEXT:      .loc [[LOGITS]] {{[0-9]+}} {{[0-9]+}}
// CHECK-NOT:       .loc
// CHECK-COUNT-24:  vdpbf16ps {{.*}}%zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK:           .file {{[0-9]+}} "softmax_grad"
// CHECK:           .file [[INPUT:[0-9]+]] "input_grad.k"
// CHECK-NEXT:      .loc [[INPUT]] {{[0-9]+}} {{[0-9]+}}
// CHECK-NOT:       .loc
// CHECK-COUNT-24:  vdpbf16ps {{.*}}%zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK:           .file {{[0-9]+}} "weight_grad.pack_b"
// CHECK:           .file {{[0-9]+}} "weight_grad.k"
// CHECK-LABEL: {{^}}_mlir_ciface_flce:

// NONE-NOT: .loc
// NONE-NOT: .debug_line
