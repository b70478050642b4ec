// --stage run on nll_loss_backward: random valid inputs (some samples ignored), out starting as
// NaN (so the zero fill is checked too), compared with the NumPy reference.
// RUN: npugrad-opt %examples/nll_loss_backward.mlir --stage run --seed 1 | FileCheck %s
// RUN: npugrad-opt %s --stage run --entry nll_none_ui8_f16 --seed 2 | FileCheck %s --check-prefix=UI8
// RUN: npugrad-opt %s --stage run --entry nll_none_1d_bf16 --seed 3 | FileCheck %s --check-prefix=ONED
// RUN: npugrad-opt %s --stage run --entry nll_sum_i32 --seed 4 | FileCheck %s --check-prefix=SUM

// CHECK: @nll_loss_backward: compiled in {{.*}} ms, ran in {{.*}} ms
// CHECK: out {{ *}}(8, 10) {{ *}}float32 {{.*}} ok

// UI8: @nll_none_ui8_f16
// UI8: out {{ *}}(33, 17) {{ *}}float16 {{.*}} ok
func.func @nll_none_ui8_f16(%g: memref<33xf16>, %s: memref<33x17xf16>, %t: memref<33xui8>, %w: memref<17xf16>,
                            %tw: memref<1xf16>, %o: memref<33x17xf16>) {
  train.nll_loss_backward grad_output(%g : memref<33xf16>) self(%s : memref<33x17xf16>) target(%t : memref<33xui8>)
      weight(%w : memref<17xf16>) total_weight(%tw : memref<1xf16>) -> out(%o : memref<33x17xf16>)
      {reduction = 0 : i64, ignore_index = 2 : i64}
  func.return
}

// 1-D self, reduction none: the one upstream value scales the single written element.
// ONED: @nll_none_1d_bf16
// ONED: out {{ *}}(13,) {{ *}}bfloat16 {{.*}} ok
func.func @nll_none_1d_bf16(%g: memref<bf16>, %s: memref<13xbf16>, %t: memref<i64>, %w: memref<13xbf16>,
                            %tw: memref<bf16>, %o: memref<13xbf16>) {
  train.nll_loss_backward grad_output(%g : memref<bf16>) self(%s : memref<13xbf16>) target(%t : memref<i64>)
      weight(%w : memref<13xbf16>) total_weight(%tw : memref<bf16>) -> out(%o : memref<13xbf16>)
      {reduction = 0 : i64}
  func.return
}

// SUM: @nll_sum_i32
// SUM: out {{ *}}(64, 100) {{ *}}float32 {{.*}} ok
func.func @nll_sum_i32(%g: memref<1xf32>, %s: memref<64x100xf32>, %t: memref<64xi32>, %w: memref<100xf32>,
                       %tw: memref<1xf32>, %o: memref<64x100xf32>) {
  train.nll_loss_backward grad_output(%g : memref<1xf32>) self(%s : memref<64x100xf32>) target(%t : memref<64xi32>)
      weight(%w : memref<100xf32>) total_weight(%tw : memref<1xf32>) -> out(%o : memref<64x100xf32>)
      {reduction = 2 : i64}
  func.return
}
