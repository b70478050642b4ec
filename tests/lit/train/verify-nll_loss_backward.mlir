// One chunk per metadata rule of the spec for train.nll_loss_backward (OPS.md §3.3): the error
// names the op and the operand or property at fault, at the op's line. Chunks without an
// expected-error are valid edge cases; FileCheck sees them printed.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// reduction is 0 (none), 1 (mean) or 2 (sum).
func.func @reduction_3(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op property 'reduction' must be 0 (none), 1 (mean) or 2 (sum), got 3}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>) {reduction = 3 : i64}
  func.return
}

// -----

// reduction is 0 (none), 1 (mean) or 2 (sum).
func.func @reduction_negative(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op property 'reduction' must be 0 (none), 1 (mean) or 2 (sum), got -1}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>) {reduction = -1 : i64}
  func.return
}

// -----

// self is 1-D or 2-D.
func.func @self_rank_3(%go: memref<f32>, %s: memref<6x10x1xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10x1xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'self' must have rank 1 or 2, got rank 3 (6, 10, 1)}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10x1xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10x1xf32>)
  func.return
}

// -----

// self is 1-D or 2-D.
func.func @self_rank_0(%go: memref<f32>, %s: memref<f32>, %t: memref<6xi64>, %w: memref<10xf32>,
    %tw: memref<1xf32>, %out: memref<f32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'self' must have rank 1 or 2, got rank 0 ()}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<f32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<f32>)
  func.return
}

// -----

// target is at most 1-D.
func.func @target_rank_2(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6x1xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'target' must have rank 0 or 1, got rank 2 (6, 1)}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6x1xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// self.shape[0] = target.shape[0].
func.func @target_length(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<5xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'target' must have shape (N,) = (6,), got (5,)}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<5xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// A 2-D self needs a 1-D target.
func.func @self_2d_target_0d(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<i64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'target' must be 1-D (N,) when 'self' is 2-D, got rank 0}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<i64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// A 1-D self with a 1-D target is rejected (as PyTorch does)...
func.func @self_1d_target_1d(%go: memref<f32>, %s: memref<10xf32>, %t: memref<3xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'target' must be 0-D when 'self' is 1-D, got rank 1}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<10xf32>)
      target(%t : memref<3xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<10xf32>)
  func.return
}

// -----

// ...also when N = C, which the vendor's size check misses.
func.func @self_1d_target_1d_n_equals_c(%go: memref<f32>, %s: memref<10xf32>, %t: memref<10xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'target' must be 0-D when 'self' is 1-D, got rank 1}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<10xf32>)
      target(%t : memref<10xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<10xf32>)
  func.return
}

// -----

// A 1-D self with a 0-D target is one sample.
func.func @self_1d_target_0d(%go: memref<f32>, %s: memref<10xf32>, %t: memref<i64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<10xf32>) {
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<10xf32>)
      target(%t : memref<i64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<10xf32>)
  func.return
}
// CHECK: func.func @self_1d_target_0d

// -----

// weight.shape = (C,).
func.func @weight_shape(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<6xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'weight' must have shape (C,) = (10,), got (6,)}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<6xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// weight.shape = (C,).
func.func @weight_rank(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<1x10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'weight' must have shape (C,) = (10,), got (1, 10)}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<1x10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// totalWeight has exactly one element.
func.func @total_weight_numel(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<2xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'total_weight' must have exactly one element, got shape (2,)}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<2xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// totalWeight may be () as well as (1,).
func.func @total_weight_scalar(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<f32>, %out: memref<6x10xf32>) {
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<f32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}
// CHECK: func.func @total_weight_scalar

// -----

// gradOutput is (N,) for reduction none with a 2-D self.
func.func @grad_output_none(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'grad_output' must have shape (N,) = (6,) for reduction none, got ()}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>) {reduction = 0 : i64}
  func.return
}

// -----

// gradOutput is (N,) for reduction none with a 2-D self.
func.func @grad_output_none_length(%go: memref<7xf32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'grad_output' must have shape (N,) = (6,) for reduction none, got (7,)}}
  train.nll_loss_backward grad_output(%go : memref<7xf32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>) {reduction = 0 : i64}
  func.return
}

// -----

// gradOutput has one element for reduction mean...
func.func @grad_output_mean(%go: memref<6xf32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'grad_output' must have exactly one element (reduction mean/sum, or 1-D self), got shape (6,)}}
  train.nll_loss_backward grad_output(%go : memref<6xf32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// ...and for reduction sum (rank 0 or 1).
func.func @grad_output_sum_rank(%go: memref<1x1xf32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'grad_output' must have rank 0 or 1, got rank 2 (1, 1)}}
  train.nll_loss_backward grad_output(%go : memref<1x1xf32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>) {reduction = 2 : i64}
  func.return
}

// -----

// ...and for reduction none with a 1-D self (one sample).
func.func @grad_output_none_1d(%go: memref<10xf32>, %s: memref<10xf32>, %t: memref<i64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'grad_output' must have exactly one element (reduction mean/sum, or 1-D self), got shape (10,)}}
  train.nll_loss_backward grad_output(%go : memref<10xf32>) self(%s : memref<10xf32>)
      target(%t : memref<i64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<10xf32>) {reduction = 0 : i64}
  func.return
}

// -----

// out.shape = self.shape.
func.func @out_shape(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>, %w: memref<10xf32>,
    %tw: memref<1xf32>, %out: memref<10x6xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'out' must have shape (6, 10) (the shape of 'self'), got (10, 6)}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<10x6xf32>)
  func.return
}

// -----

// self is float32, float16 or bfloat16.
func.func @self_dtype(%go: memref<f32>, %s: memref<6x10xf64>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'self' must have dtype float32, float16 or bfloat16, got f64}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf64>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// gradOutput has self's dtype.
func.func @grad_output_dtype(%go: memref<f16>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'grad_output' must have the dtype of 'self' (float32), got float16}}
  train.nll_loss_backward grad_output(%go : memref<f16>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// weight has self's dtype.
func.func @weight_dtype(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xbf16>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'weight' must have the dtype of 'self' (float32), got bfloat16}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xbf16>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// totalWeight has self's dtype.
func.func @total_weight_dtype(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf64>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'total_weight' must have the dtype of 'self' (float32), got f64}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf64>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// out has self's dtype.
func.func @out_dtype(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>, %w: memref<10xf32>,
    %tw: memref<1xf32>, %out: memref<6x10xf16>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'out' must have the dtype of 'self' (float32), got float16}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf16>)
  func.return
}

// -----

// target is int64, int32 or uint8.
func.func @target_dtype(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi16>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'target' must have dtype int64, int32 or uint8, got i16}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi16>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// target is an integer type.
func.func @target_float(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xf32>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'target' must have dtype int64, int32 or uint8, got float32}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xf32>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// Operands are memrefs.
func.func @tensor_operand(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: tensor<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'weight' must be a memref, got tensor<10xf32>}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : tensor<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// Operands are memrefs.
func.func @scalar_operand(%go: f32, %s: memref<6x10xf32>, %t: memref<6xi64>, %w: memref<10xf32>,
    %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'grad_output' must be a memref, got f32}}
  train.nll_loss_backward grad_output(%go : f32) self(%s : memref<6x10xf32>) target(%t : memref<6xi64>)
      weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) -> out(%out : memref<6x10xf32>)
  func.return
}

// -----

// Operands are plain arrays: identity or strided layouts only.
func.func @blocked_layout(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>,
    %out: memref<6x10xf32, affine_map<(d0, d1) -> (d1 floordiv 4, d0, d1 mod 4)>>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'out' must have an identity or strided layout, got memref<6x10xf32, affine_map<}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32, affine_map<(d0, d1) -> (d1 floordiv 4, d0, d1 mod 4)>>)
  func.return
}

// -----

// Operands live in the default memory space.
func.func @memory_space(%go: memref<f32>, %s: memref<6x10xf32, 1>, %t: memref<6xi64>,
    %w: memref<10xf32>, %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op operand 'self' must be in global (default) memory or a local level (#npu.mem<level>), got memref<6x10xf32, 1 : i64>}}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32, 1>)
      target(%t : memref<6xi64>) weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) ->
      out(%out : memref<6x10xf32>)
  func.return
}

// -----

// weight is required (torch_npu substitutes ones(C)): only the generic form can omit it.
func.func @missing_weight(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>,
    %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // expected-error@+1 {{'train.nll_loss_backward' op Expected 6 operands, but got 5}}
  "train.nll_loss_backward"(%go, %s, %t, %tw, %out) <{reduction = 1 : i64, ignore_index = -100 : i64}>
      : (memref<f32>, memref<6x10xf32>, memref<6xi64>, memref<1xf32>, memref<6x10xf32>) -> ()
  func.return
}
