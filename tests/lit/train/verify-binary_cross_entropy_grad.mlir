// One chunk per metadata rule of the spec for train.binary_cross_entropy_grad (OPS.md §5.3): the error
// names the op and the operand or property at fault, at the op's line. Chunks without an
// expected-error are valid edge cases; FileCheck sees them printed.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// reduction is 0 (none), 1 (mean) or 2 (sum).
func.func @reduction_3(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op property 'reduction' must be 0 (none), 1 (mean) or 2 (sum), got 3}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>) {reduction = 3 : i64}
  func.return
}

// -----

// reduction is 0 (none), 1 (mean) or 2 (sum).
func.func @reduction_negative(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op property 'reduction' must be 0 (none), 1 (mean) or 2 (sum), got -1}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>) {reduction = -1 : i64}
  func.return
}

// -----

// reduction is an i64.
func.func @reduction_type(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op 1.000000e+00 : f64 should be of base attribute integer}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>) {reduction = 1.0 : f64}
  func.return
}

// -----

// input_x is a supported float type.
func.func @input_x_dtype(%x: memref<16xf64>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'input_x' must have dtype float32, float16 or bfloat16, got f64}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf64>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// input_x is a float type.
func.func @input_x_int(%x: memref<16xi32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'input_x' must have dtype float32, float16 or bfloat16, got int32}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xi32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// input_y has input_x's dtype (one precision per call).
func.func @input_y_dtype(%x: memref<16xf32>, %y: memref<16xf16>, %d: memref<1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'input_y' must have the dtype of 'input_x' (float32), got float16}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf16>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// dloss has input_x's dtype (one precision per call).
func.func @dloss_dtype(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xbf16>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'dloss' must have the dtype of 'input_x' (float32), got bfloat16}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xbf16>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// weight has input_x's dtype (one precision per call).
func.func @weight_dtype(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %w: memref<16xf16>, %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'weight' must have the dtype of 'input_x' (float32), got float16}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) weight(%w : memref<16xf16>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// dx has input_x's dtype (one precision per call).
func.func @dx_dtype(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<16xbf16>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'dx' must have the dtype of 'input_x' (float32), got bfloat16}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xbf16>)
  func.return
}

// -----

// input_y has N elements, in input_x's shape.
func.func @input_y_shape(%x: memref<16xf32>, %y: memref<15xf32>, %d: memref<1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'input_y' must have shape (16,) (the shape of 'input_x'), got (15,)}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<15xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// weight has N elements, in input_x's shape.
func.func @weight_shape(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %w: memref<4x4xf32>, %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'weight' must have shape (16,) (the shape of 'input_x'), got (4, 4)}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) weight(%w : memref<4x4xf32>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// dx has N elements, in input_x's shape.
func.func @dx_shape(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<17xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'dx' must have shape (16,) (the shape of 'input_x'), got (17,)}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<17xf32>)
  func.return
}

// -----

// dloss has one value per element for reduction none.
func.func @dloss_none(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'dloss' must have shape (16,) (the shape of 'input_x' for reduction none), got (1,)}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>) {reduction = 0 : i64}
  func.return
}

// -----

// dloss has a single element for reduction mean...
func.func @dloss_mean(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<16xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'dloss' must have exactly one element for reduction mean/sum, got shape (16,)}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<16xf32>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// ...and sum, as a 0-D or 1-D memref.
func.func @dloss_sum_rank(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1x1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'dloss' must have rank 0 or 1, got rank 2 (1, 1)}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1x1xf32>) -> dx(%dx : memref<16xf32>) {reduction = 2 : i64}
  func.return
}

// -----

// A 0-D dloss is one element.
func.func @dloss_scalar(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<f32>,
    %dx: memref<16xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<f32>) -> dx(%dx : memref<16xf32>) {reduction = 2 : i64}
  func.return
}
// CHECK: func.func @dloss_scalar

// -----

// input_x has at most 8 dims.
func.func @input_x_rank_9(%x: memref<1x1x1x1x1x1x1x1x16xf32>, %y: memref<1x1x1x1x1x1x1x1x16xf32>,
    %d: memref<1xf32>, %dx: memref<1x1x1x1x1x1x1x1x16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'input_x' must have rank 0 to 8, got rank 9 (1, 1, 1, 1, 1, 1, 1, 1, 16)}}
  train.binary_cross_entropy_grad input_x(%x : memref<1x1x1x1x1x1x1x1x16xf32>)
      input_y(%y : memref<1x1x1x1x1x1x1x1x16xf32>) dloss(%d : memref<1xf32>) ->
      dx(%dx : memref<1x1x1x1x1x1x1x1x16xf32>)
  func.return
}

// -----

// N = 0 (input_size 0) is valid; a negative input_size cannot be written as a memref.
func.func @empty(%x: memref<0xf32>, %y: memref<0xf32>, %d: memref<1xf32>, %dx: memref<0xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<0xf32>) input_y(%y : memref<0xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<0xf32>)
  func.return
}
// CHECK: func.func @empty

// -----

// Operands are memrefs.
func.func @tensor_operand(%x: tensor<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'input_x' must be a memref, got tensor<16xf32>}}
  train.binary_cross_entropy_grad input_x(%x : tensor<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// Operands are memrefs.
func.func @scalar_dloss(%x: memref<16xf32>, %y: memref<16xf32>, %d: f32, %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'dloss' must be a memref, got f32}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : f32) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// Operands are plain arrays: identity or strided layouts only.
func.func @blocked_layout(%x: memref<16xf32, affine_map<(d0) -> (d0 floordiv 4, d0 mod 4)>>,
    %y: memref<16xf32>, %d: memref<1xf32>, %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'input_x' must have an identity or strided layout, got memref<16xf32, affine_map<}}
  train.binary_cross_entropy_grad
      input_x(%x : memref<16xf32, affine_map<(d0) -> (d0 floordiv 4, d0 mod 4)>>)
      input_y(%y : memref<16xf32>) dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32>)
  func.return
}

// -----

// Operands live in the default memory space.
func.func @memory_space(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>,
    %dx: memref<16xf32, 3>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op operand 'dx' must be in global (default) memory or a local level (#npu.mem<level>), got memref<16xf32, 3 : i64>}}
  train.binary_cross_entropy_grad input_x(%x : memref<16xf32>) input_y(%y : memref<16xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<16xf32, 3>)
  func.return
}

// -----

// dloss is required (weight is the only optional operand): only the generic form can omit it.
func.func @missing_dloss(%x: memref<16xf32>, %y: memref<16xf32>, %dx: memref<16xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op expected 1 value for dloss, but got 0}}
  "train.binary_cross_entropy_grad"(%x, %y, %dx) <{operandSegmentSizes = array<i32: 1, 1, 0, 0, 1>}>
      : (memref<16xf32>, memref<16xf32>, memref<16xf32>) -> ()
  func.return
}

// -----

// dx is required.
func.func @missing_dx(%x: memref<16xf32>, %y: memref<16xf32>, %d: memref<1xf32>) {
  // expected-error@+1 {{'train.binary_cross_entropy_grad' op expected 1 value for dx, but got 0}}
  "train.binary_cross_entropy_grad"(%x, %y, %d) <{operandSegmentSizes = array<i32: 1, 1, 1, 0, 0>}>
      : (memref<16xf32>, memref<16xf32>, memref<1xf32>) -> ()
  func.return
}
