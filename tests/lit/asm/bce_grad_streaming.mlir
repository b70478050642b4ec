// BCE's gradient on dynamic shapes: dx is written past the caches where a core stores enough of
// it (vectorize-elementwise-loops: aligned 64-byte non-temporal stores, then an sfence), and
// through them otherwise (plain vector stores); both loops are in the machine code.
// RUN: npugrad-opt %s --stage asm --cpu %inputs/avx512.toml | FileCheck %s

// CHECK-LABEL: {{^}}bce_grad:
// CHECK-DAG: vdivps{{.*}}%zmm
// CHECK-DAG: vmovntps{{.*}}%zmm{{.*}}(%
// CHECK-DAG: sfence
// CHECK-DAG: vmovups{{.*}}%zmm{{[0-9]+}}, {{.*}}(%
// CHECK-LABEL: _mlir_ciface_bce_grad:
func.func @bce_grad(%x: memref<?xf32>, %y: memref<?xf32>, %dloss: memref<1xf32>,
                    %w: memref<?xf32>, %dx: memref<?xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<?xf32>) input_y(%y : memref<?xf32>)
      dloss(%dloss : memref<1xf32>) weight(%w : memref<?xf32>) -> dx(%dx : memref<?xf32>)
      {reduction = 1 : i64}
  func.return
}
