// --stage run compiles the module, runs it on random valid inputs and compares every output
// with the NumPy reference.
// RUN: npugrad-opt %examples/bce_grad.mlir --stage run --seed 1 | FileCheck %s
// RUN: npugrad-opt %s --stage run | FileCheck %s --check-prefix=F16

// CHECK: @bce_grad: compiled in {{.*}} ms, ran in {{.*}} ms
// CHECK: dx {{ *}}(1000,) {{ *}}float32 {{.*}} ok

// F16: @bce_sum_f16
// F16: dx {{ *}}(3, 5, 7) {{ *}}float16 {{.*}} ok
func.func @bce_sum_f16(%x: memref<3x5x7xf16>, %y: memref<3x5x7xf16>, %d: memref<f16>, %dx: memref<3x5x7xf16>) {
  train.binary_cross_entropy_grad input_x(%x : memref<3x5x7xf16>) input_y(%y : memref<3x5x7xf16>)
      dloss(%d : memref<f16>) -> dx(%dx : memref<3x5x7xf16>) {reduction = 2 : i64}
  func.return
}
