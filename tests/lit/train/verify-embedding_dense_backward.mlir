// One chunk per metadata rule of the spec for train.embedding_dense_backward (OPS.md §2.3): the error
// names the op and the operand or property at fault, at the op's line. Chunks without an
// expected-error are valid edge cases; FileCheck sees them printed.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// numWeights is required.
func.func @num_weights_missing(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>,
    %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op property 'num_weights' expected in operation 'train.embedding_dense_backward'}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32xf32>)
  func.return
}

// -----

// numWeights is a count.
func.func @num_weights_negative(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>,
    %out: memref<?x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op property 'num_weights' must be >= 0, got -1}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<?x32xf32>) {num_weights = -1 : i64}
  func.return
}

// -----

// numWeights is an i64.
func.func @num_weights_type(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>, %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op 1.500000e+00 : f64 should be of base attribute integer}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32xf32>) {num_weights = 1.5 : f64}
  func.return
}

// -----

// scaleGradByFreq is a bool.
func.func @scale_grad_by_freq_type(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>,
    %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op Expected attribute i1 but got i64}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32xf32>) {num_weights = 100 : i64, scale_grad_by_freq = 1 : i64}
  func.return
}

// -----

// grad has at most 8 dims.
func.func @grad_rank_9(%g: memref<1x1x1x1x1x1x1x20x32xf32>, %i: memref<4x5xi32>,
    %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'grad' must have rank 1 to 8, got rank 9 (1, 1, 1, 1, 1, 1, 1, 20, 32)}}
  train.embedding_dense_backward grad(%g : memref<1x1x1x1x1x1x1x20x32xf32>)
      indices(%i : memref<4x5xi32>) -> out(%out : memref<100x32xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// grad has at least its D dim.
func.func @grad_rank_0(%g: memref<f32>, %i: memref<4x5xi32>, %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'grad' must have rank 1 to 8, got rank 0 ()}}
  train.embedding_dense_backward grad(%g : memref<f32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// indices has at most 8 dims.
func.func @indices_rank_9(%g: memref<4x5x32xf32>, %i: memref<1x1x1x1x1x1x1x4x5xi32>,
    %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'indices' must have rank 0 to 8, got rank 9 (1, 1, 1, 1, 1, 1, 1, 4, 5)}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>)
      indices(%i : memref<1x1x1x1x1x1x1x4x5xi32>) -> out(%out : memref<100x32xf32>)
      {num_weights = 100 : i64}
  func.return
}

// -----

// out is 2-D (numWeights, D).
func.func @out_rank(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>, %out: memref<100x32x1xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'out' must have rank 2, got rank 3 (100, 32, 1)}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32x1xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// grad is float32, float16 or bfloat16.
func.func @grad_dtype(%g: memref<4x5x32xf64>, %i: memref<4x5xi32>, %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'grad' must have dtype float32, float16 or bfloat16, got f64}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf64>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// indices is int32 or int64.
func.func @indices_dtype(%g: memref<4x5x32xf32>, %i: memref<4x5xi16>, %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'indices' must have dtype int32 or int64, got i16}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi16>) ->
      out(%out : memref<100x32xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// indices is int32 or int64 (not a float type).
func.func @indices_float(%g: memref<4x5x32xf32>, %i: memref<4x5xf32>, %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'indices' must have dtype int32 or int64, got float32}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xf32>) ->
      out(%out : memref<100x32xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// out is float32, float16 or bfloat16 (it may differ from grad's).
func.func @out_dtype(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>, %out: memref<100x32xi32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'out' must have dtype float32, float16 or bfloat16, got int32}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32xi32>) {num_weights = 100 : i64}
  func.return
}

// -----

// out may have another float dtype than grad: the result is cast.
func.func @out_other_float(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>, %out: memref<100x32xbf16>) {
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32xbf16>) {num_weights = 100 : i64}
  func.return
}
// CHECK: func.func @out_other_float

// -----

// prod(grad.shape[:-1]) = indices.numel.
func.func @indices_numel(%g: memref<4x5x32xf32>, %i: memref<3x7xi32>, %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'indices' must have prod(grad.shape[:-1]) = 20 elements, got 21}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<3x7xi32>) ->
      out(%out : memref<100x32xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// Only the element count matters, not the shape of indices.
func.func @indices_other_shape(%g: memref<4x5x32xf32>, %i: memref<2x10xi32>,
    %out: memref<100x32xf32>) {
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<2x10xi32>) ->
      out(%out : memref<100x32xf32>) {num_weights = 100 : i64}
  func.return
}
// CHECK: func.func @indices_other_shape

// -----

// The count check is skipped when D = 0.
func.func @d_zero(%g: memref<4x5x0xf32>, %i: memref<7xi64>, %out: memref<100x0xf32>) {
  train.embedding_dense_backward grad(%g : memref<4x5x0xf32>) indices(%i : memref<7xi64>) ->
      out(%out : memref<100x0xf32>) {num_weights = 100 : i64}
  func.return
}
// CHECK: func.func @d_zero

// -----

// ...and while D is dynamic: the launch checks it on the actual arrays.
func.func @d_dynamic(%g: memref<4x5x?xf32>, %i: memref<7xi64>, %out: memref<100x?xf32>) {
  train.embedding_dense_backward grad(%g : memref<4x5x?xf32>) indices(%i : memref<7xi64>) ->
      out(%out : memref<100x?xf32>) {num_weights = 100 : i64}
  func.return
}
// CHECK: func.func @d_dynamic

// -----

// out.shape = (numWeights, D): rows.
func.func @out_rows(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>, %out: memref<99x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'out' must have shape (num_weights, D) = (100, 32), got (99, 32)}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<99x32xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// out.shape = (numWeights, D): columns.
func.func @out_columns(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>, %out: memref<100x16xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'out' must have shape (num_weights, D) = (100, 32), got (100, 16)}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x16xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// Operands are memrefs.
func.func @tensor_operand(%g: memref<4x5x32xf32>, %i: tensor<4x5xi32>, %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'indices' must be a memref, got tensor<4x5xi32>}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : tensor<4x5xi32>) ->
      out(%out : memref<100x32xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// No private formats: a blocked layout is rejected; a strided one is not.
func.func @blocked_layout(
    %g: memref<4x5x32xf32, affine_map<(d0, d1, d2) -> (d2 floordiv 16, d0, d1, d2 mod 16)>>,
    %i: memref<4x5xi32>, %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'grad' must have an identity or strided layout, got memref<4x5x32xf32, affine_map<}}
  train.embedding_dense_backward
      grad(%g : memref<4x5x32xf32, affine_map<(d0, d1, d2) -> (d2 floordiv 16, d0, d1, d2 mod 16)>>)
      indices(%i : memref<4x5xi32>) -> out(%out : memref<100x32xf32>) {num_weights = 100 : i64}
  func.return
}

// -----

// A strided layout is accepted.
func.func @strided_layout(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>,
    %out: memref<100x32xf32, strided<[64, 2]>>) {
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32xf32, strided<[64, 2]>>) {num_weights = 100 : i64}
  func.return
}
// CHECK: func.func @strided_layout

// -----

// Operands live in the default memory space.
func.func @memory_space(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>, %out: memref<100x32xf32, 2>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op operand 'out' must be in global (default) memory or a local level (#npu.mem<level>), got memref<100x32xf32, 2 : i64>}}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>) ->
      out(%out : memref<100x32xf32, 2>) {num_weights = 100 : i64}
  func.return
}

// -----

// A required operand (indices) is missing: only the generic form can say so.
func.func @missing_indices(%g: memref<4x5x32xf32>, %out: memref<100x32xf32>) {
  // expected-error@+1 {{'train.embedding_dense_backward' op Expected 3 operands, but got 2}}
  "train.embedding_dense_backward"(%g, %out) <{num_weights = 100 : i64}>
      : (memref<4x5x32xf32>, memref<100x32xf32>) -> ()
  func.return
}
