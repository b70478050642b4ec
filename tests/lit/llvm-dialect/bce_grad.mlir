// The upstream MLIR bindings lower the loops to the LLVM dialect, with a C interface per function.
// bf16 is widened and rounded (nearest even) with integer ops: there is no bf16 arithmetic.
// RUN: npugrad-opt %s --stage llvm-dialect --no-distribute | FileCheck %s

// CHECK:     llvm.func @bce_grad(
// CHECK:       llvm.bitcast %{{.*}} : bf16 to i16
// CHECK:       llvm.intr.maximum(%{{.*}}, %{{.*}}) : (f32, f32) -> f32
// CHECK:       llvm.fdiv
// CHECK:       llvm.bitcast %{{.*}} : i16 to bf16
// CHECK:     llvm.func @_mlir_ciface_bce_grad(%{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr, %{{.*}}: !llvm.ptr)
// CHECK-NOT: scf.for
// CHECK-NOT: memref.load
func.func @bce_grad(%x: memref<?xbf16>, %y: memref<?xbf16>, %d: memref<bf16>, %dx: memref<?xbf16>) {
  train.binary_cross_entropy_grad input_x(%x : memref<?xbf16>) input_y(%y : memref<?xbf16>)
      dloss(%d : memref<bf16>) -> dx(%dx : memref<?xbf16>) {reduction = 2 : i64}
  func.return
}
