// --stage run on the embedding gradient: random valid indices (the padding row among them),
// output pre-filled with NaN, compared with the NumPy reference.
// RUN: npugrad-opt %examples/embedding_dense_backward.mlir --stage run --seed 1 | FileCheck %s
// RUN: npugrad-opt %s --stage run --entry scaled_padded_f16 --seed 2 | FileCheck %s --check-prefix=F16
// RUN: npugrad-opt %s --stage run --entry bf16 --seed 3 | FileCheck %s --check-prefix=BF16
// RUN: npugrad-opt %s --stage run --entry bf16_to_f32 | FileCheck %s --check-prefix=BF16-F32

// CHECK: @embedding_dense_backward: compiled in {{.*}} ms, ran in {{.*}} ms
// CHECK: out {{ *}}(50, 16) {{ *}}float32 {{.*}} ok

// Frequency scaling with a padding row; 3-D grad, indices (6, 5) against grad's leading (3, 10).
// F16: @scaled_padded_f16
// F16: out {{ *}}(7, 33) {{ *}}float16 {{.*}} ok
func.func @scaled_padded_f16(%g: memref<3x10x33xf16>, %i: memref<6x5xi64>, %out: memref<7x33xf16>) {
  train.embedding_dense_backward grad(%g : memref<3x10x33xf16>) indices(%i : memref<6x5xi64>)
      -> out(%out : memref<7x33xf16>) {num_weights = 7 : i64, padding_idx = 2 : i64, scale_grad_by_freq = true}
  func.return
}

// bf16 in and out, summed (no scaling), many contributions per row.
// BF16: @bf16
// BF16: out {{ *}}(5, 19) {{ *}}bfloat16 {{.*}} ok
func.func @bf16(%g: memref<200x19xbf16>, %i: memref<200xi32>, %out: memref<5x19xbf16>) {
  train.embedding_dense_backward grad(%g : memref<200x19xbf16>) indices(%i : memref<200xi32>)
      -> out(%out : memref<5x19xbf16>) {num_weights = 5 : i64, padding_idx = 4 : i64}
  func.return
}

// bf16 grad accumulated into a float32 out; padding_idx past the end means no padding.
// BF16-F32: @bf16_to_f32
// BF16-F32: out {{ *}}(9, 8) {{ *}}float32 {{.*}} ok
func.func @bf16_to_f32(%g: memref<12x8xbf16>, %i: memref<3x4xi32>, %out: memref<9x8xf32>) {
  train.embedding_dense_backward grad(%g : memref<12x8xbf16>) indices(%i : memref<3x4xi32>)
      -> out(%out : memref<9x8xf32>) {num_weights = 9 : i64, padding_idx = 9 : i64, scale_grad_by_freq = true}
  func.return
}
