// One chunk per metadata rule of the spec for train.fused_linear_cross_entropy_loss_grad (OPS.md §1.7): the error
// names the op and the operand or property at fault, at the op's line. Chunks without an
// expected-error are valid edge cases; FileCheck sees them printed.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// Label smoothing (FORWARD.md §4) spreads α over the global vocabulary: it needs vocab_size.
func.func @label_smoothing(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'label_smoothing' = 0.1 needs 'vocab_size', the global vocabulary K (>= V = 256), got 0}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>) {label_smoothing = 0.1 : f64}
  func.return
}

// -----

// Neither softmax (high-performance mode) nor both statistics (memory-saving mode).
func.func @no_mode(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op needs operand 'softmax' (high-performance mode) or both 'logits_max' and 'sum_exp_logits' (memory-saving mode), got none of them}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// Only one of the two statistics and no softmax.
func.func @only_logits_max(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %gx: memref<8x16xbf16>,
    %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op needs operand 'softmax' (high-performance mode) or both 'logits_max' and 'sum_exp_logits' (memory-saving mode), got only 'logits_max'}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) ->
      input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// Only one of the two statistics and no softmax.
func.func @only_sum_exp_logits(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %se: memref<8xf32>, %gx: memref<8x16xbf16>,
    %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op needs operand 'softmax' (high-performance mode) or both 'logits_max' and 'sum_exp_logits' (memory-saving mode), got only 'sum_exp_logits'}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) sum_exp_logits(%se : memref<8xf32>) ->
      input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// grad is 1-D (BT,).
func.func @rank_grad(%g: memref<8x1xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'grad' must have rank 1, got rank 2 (8, 1)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8x1xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// targetMask is 1-D.
func.func @rank_target_mask(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1x1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'target_mask' must have rank 1, got rank 2 (1, 1)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1x1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// maskedTarget is 1-D.
func.func @rank_masked_target(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<i64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'masked_target' must have rank 1, got rank 0 ()}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<i64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// The statistics are 1-D.
func.func @rank_logits_max(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8x1xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'logits_max' must have rank 1, got rank 2 (8, 1)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8x1xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// The statistics are 1-D.
func.func @rank_sum_exp_logits(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<f32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'sum_exp_logits' must have rank 1, got rank 0 ()}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<f32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// input is 2-D (BT, H).
func.func @rank_input(%g: memref<8xf32>, %x: memref<128xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'input' must have rank 2, got rank 1 (128,)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<128xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// weight is 2-D (V, H).
func.func @rank_weight(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<2x128x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'weight' must have rank 2, got rank 3 (2, 128, 16)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<2x128x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// softmax is 2-D (BT, V).
func.func @rank_softmax(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %p: memref<2048xf32>, %gx: memref<8x16xbf16>,
    %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax' must have rank 2, got rank 1 (2048,)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) softmax(%p : memref<2048xf32>) ->
      input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// inputGradOut is 2-D.
func.func @rank_input_grad_out(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<128xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'input_grad_out' must have rank 2, got rank 1 (128,)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<128xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// weightGradOut is 2-D.
func.func @rank_weight_grad_out(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16x1xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'weight_grad_out' must have rank 2, got rank 3 (256, 16, 1)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16x1xbf16>)
  func.return
}

// -----

// grad is float32.
func.func @dtype_grad(%g: memref<8xbf16>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'grad' must have dtype float32, got bfloat16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xbf16>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// input is a float type (the spec allows only float16/bfloat16; npugrad also takes float32).
func.func @dtype_input(%g: memref<8xf32>, %x: memref<8x16xf64>, %w: memref<256x16xf64>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xf64>, %gw: memref<256x16xf64>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'input' must have dtype float32, float16 or bfloat16, got f64}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xf64>)
      weight(%w : memref<256x16xf64>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xf64>)
      weight_grad_out(%gw : memref<256x16xf64>)
  func.return
}

// -----

// weight has the dtype of input.
func.func @dtype_weight(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'weight' must have the dtype of 'input' (bfloat16), got float16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// inputGradOut has the dtype of input.
func.func @dtype_input_grad_out(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xf32>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'input_grad_out' must have the dtype of 'input' (bfloat16), got float32}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xf32>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// weightGradOut has the dtype of input.
func.func @dtype_weight_grad_out(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'weight_grad_out' must have the dtype of 'input' (bfloat16), got float16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xf16>)
  func.return
}

// -----

// targetMask is bool or bit-packed uint8.
func.func @dtype_target_mask(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xi8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'target_mask' must have dtype bool or uint8, got i8}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xi8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// maskedTarget is int32 or int64.
func.func @dtype_masked_target(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xui8>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'masked_target' must have dtype int32 or int64, got uint8}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xui8>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// The statistics are float32.
func.func @dtype_logits_max(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf16>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'logits_max' must have dtype float32, got float16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf16>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// The statistics are float32.
func.func @dtype_sum_exp_logits(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xbf16>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'sum_exp_logits' must have dtype float32, got bfloat16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xbf16>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// softmax is float32.
func.func @dtype_softmax(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %p: memref<8x256xbf16>, %gx: memref<8x16xbf16>,
    %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax' must have dtype float32, got bfloat16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) softmax(%p : memref<8x256xbf16>) ->
      input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// input.shape[0] = BT = grad.shape[0].
func.func @input_bt(%g: memref<8xf32>, %x: memref<9x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'input' must have BT (grad.shape[0]) = 8 in dimension 0, got shape (9, 16)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<9x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// weight.shape[1] = H = input.shape[1].
func.func @weight_h(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x32xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'weight' must have H (input.shape[1]) = 16 in dimension 1, got shape (256, 32)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x32xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// maskedTarget.shape = (BT,).
func.func @masked_target_shape(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<7xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'masked_target' must have shape (BT,) = (8,), got (7,)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<7xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// A bool targetMask has one element per token.
func.func @bool_mask_length(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xi1>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'target_mask' must have shape (BT,) = (8,) for a bool mask, got (1,)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xi1>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// A bit-packed uint8 targetMask needs length*8 >= BT: 2 bytes hold only 16 of 17 tokens.
func.func @uint8_mask_too_short(%g: memref<17xf32>, %x: memref<17x16xbf16>,
    %w: memref<256x16xbf16>, %mask: memref<2xui8>, %t: memref<17xi64>, %lm: memref<17xf32>,
    %se: memref<17xf32>, %gx: memref<17x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'target_mask' (bit-packed uint8) needs at least ceil(BT/8) = 3 bytes, got 2}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<17xf32>) input(%x : memref<17x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<2xui8>)
      masked_target(%t : memref<17xi64>) logits_max(%lm : memref<17xf32>)
      sum_exp_logits(%se : memref<17xf32>) -> input_grad_out(%gx : memref<17x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// A longer bit-packed mask is accepted (bits past BT are ignored).
func.func @uint8_mask_longer(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<4xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<4xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}
// CHECK: func.func @uint8_mask_longer

// -----

// softmax.shape = (BT, V).
func.func @softmax_shape(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %p: memref<8x255xf32>, %gx: memref<8x16xbf16>,
    %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax' must have shape (BT, V) = (8, 256), got (8, 255)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) softmax(%p : memref<8x255xf32>) ->
      input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// Statistics shape = (BT,).
func.func @logits_max_shape(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<16xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'logits_max' must have shape (BT,) = (8,), got (16,)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<16xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// Statistics shape = (BT,).
func.func @sum_exp_logits_shape(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<1xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'sum_exp_logits' must have shape (BT,) = (8,), got (1,)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<1xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// inputGradOut.shape = (BT, H).
func.func @input_grad_out_shape(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<16x8xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'input_grad_out' must have shape (BT, H) = (8, 16), got (16, 8)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<16x8xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// weightGradOut.shape = (V, H), not (V, BT) as the vendor table says (OPS.md 1.8 item 2).
func.func @weight_grad_out_shape(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x8xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'weight_grad_out' must have shape (V, H) = (256, 16), got (256, 8)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x8xbf16>)
  func.return
}

// -----

// weightGradOut.shape = (V, H).
func.func @weight_grad_out_rows(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<128x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'weight_grad_out' must have shape (V, H) = (256, 16), got (128, 16)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<128x16xbf16>)
  func.return
}

// -----

// V < 128 is rejected in high-performance mode...
func.func @v_below_128_high_performance(%g: memref<8xf32>, %x: memref<8x16xbf16>,
    %w: memref<127x16xbf16>, %mask: memref<1xui8>, %t: memref<8xi64>, %p: memref<8x127xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<127x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'weight' must have at least 128 rows (V) in high-performance mode, got 127}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<127x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) softmax(%p : memref<8x127xf32>) ->
      input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<127x16xbf16>)
  func.return
}

// -----

// ...and accepted in memory-saving mode (the vendor checks it only with softmax).
func.func @v_below_128_memory_saving(%g: memref<8xf32>, %x: memref<8x16xbf16>,
    %w: memref<1x16xbf16>, %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>,
    %se: memref<8xf32>, %gx: memref<8x16xbf16>, %gw: memref<1x16xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<1x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<1x16xbf16>)
  func.return
}
// CHECK: func.func @v_below_128_memory_saving

// -----

// In high-performance mode the statistics are ignored: they are not checked.
func.func @high_performance_ignores_statistics(%g: memref<8xf32>, %x: memref<8x16xbf16>,
    %w: memref<256x16xbf16>, %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<3x3xf16>,
    %se: memref<8xf32>, %p: memref<8x256xf32>, %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<3x3xf16>)
      sum_exp_logits(%se : memref<8xf32>) softmax(%p : memref<8x256xf32>) ->
      input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}
// CHECK: func.func @high_performance_ignores_statistics

// -----

// Dynamic dimensions are checked at launch; the static ones that are known still must agree.
func.func @dynamic_bt(%g: memref<?xf32>, %x: memref<8x?xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x17xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'input_grad_out' must have shape (BT, H) = (8, 16), got (8, 17)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<?xf32>) input(%x : memref<8x?xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x17xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// Operands are memrefs.
func.func @tensor_operand(%g: memref<8xf32>, %x: tensor<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'input' must be a memref, got tensor<8x16xbf16>}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : tensor<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// ND format only: a blocked (fractal-like) layout is rejected...
func.func @blocked_layout(%g: memref<8xf32>,
    %x: memref<8x16xbf16, affine_map<(d0, d1) -> (d1 floordiv 8, d0, d1 mod 8)>>,
    %w: memref<256x16xbf16>, %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>,
    %se: memref<8xf32>, %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'input' must have an identity or strided layout, got memref<8x16xbf16, affine_map<}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>)
      input(%x : memref<8x16xbf16, affine_map<(d0, d1) -> (d1 floordiv 8, d0, d1 mod 8)>>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// ...a strided one (a view of a larger array) is not.
func.func @strided_layout(%g: memref<8xf32>, %x: memref<8x16xbf16, strided<[32, 1]>>,
    %w: memref<256x16xbf16>, %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>,
    %se: memref<8xf32>, %gx: memref<8x16xbf16>,
    %gw: memref<256x16xbf16, strided<[?, 1], offset: ?>>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>)
      input(%x : memref<8x16xbf16, strided<[32, 1]>>) weight(%w : memref<256x16xbf16>)
      target_mask(%mask : memref<1xui8>) masked_target(%t : memref<8xi64>)
      logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>) ->
      input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16, strided<[?, 1], offset: ?>>)
  func.return
}
// CHECK: func.func @strided_layout

// -----

// Operands live in the default memory space.
func.func @memory_space(%g: memref<8xf32, 1>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'grad' must be in global (default) memory or a local level (#npu.mem<level>), got memref<8xf32, 1 : i64>}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32, 1>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

// A required operand (grad) is missing: only the generic form can say so.
func.func @missing_grad(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %mask: memref<1xui8>,
    %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %gx: memref<8x16xbf16>,
    %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op expected 1 value for grad, but got 0}}
  "train.fused_linear_cross_entropy_loss_grad"(%x, %w, %mask, %t, %lm, %se, %gx, %gw) <{operandSegmentSizes = array<i32: 0, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1>}>
      : (memref<8x16xbf16>, memref<256x16xbf16>, memref<1xui8>, memref<8xi64>, memref<8xf32>, memref<8xf32>,
         memref<8x16xbf16>, memref<256x16xbf16>) -> ()
  func.return
}

// -----

// label_smoothing must be in [0, 1].
func.func @ls_one(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'label_smoothing' must be in [0, 1], got 1.5}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>) {label_smoothing = 1.5 : f64, vocab_size = 1000 : i64}
  func.return
}

// -----

// The global vocabulary is at least this shard's V.
func.func @ls_small_k(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'label_smoothing' = 0.1 needs 'vocab_size', the global vocabulary K (>= V = 256), got 255}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>) {label_smoothing = 0.1 : f64, vocab_size = 255 : i64}
  func.return
}

// -----

// z_loss must be finite and >= 0.
func.func @z_negative(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'z_loss' must be finite and >= 0 (0: off), got -0.0001}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>) {z_loss = -1.0e-04 : f64}
  func.return
}

// -----

// softcap must be finite and >= 0.
func.func @softcap_nan(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'softcap' must be finite and >= 0 (0: off), got nan}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>) {softcap = 0x7FF8000000000000 : f64}
  func.return
}

// -----

// The z-loss needs the logits, which high-performance mode does not recompute.
func.func @z_hp(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %p: memref<8x256xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'z_loss' needs the logits: it is not available in high-performance mode (softmax given)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) softmax(%p : memref<8x256xf32>)
      -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>) {z_loss = 1.0e-04 : f64}
  func.return
}

// -----

// The softcap needs the logits too.
func.func @softcap_hp(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %p: memref<8x256xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'softcap' needs the logits: it is not available in high-performance mode (softmax given)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) softmax(%p : memref<8x256xf32>)
      -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>) {softcap = 30.0 : f64}
  func.return
}

// -----

// Label smoothing works in high-performance mode (the softmax is all it needs).
// CHECK-LABEL: func.func @ls_hp
// CHECK: train.fused_linear_cross_entropy_loss_grad
func.func @ls_hp(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %p: memref<8x256xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) softmax(%p : memref<8x256xf32>)
      -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>) {label_smoothing = 0.1 : f64, vocab_size = 1000 : i64}
  func.return
}

// -----

// Every extension at once, memory-saving mode.
// CHECK-LABEL: func.func @all_extensions
// CHECK: train.fused_linear_cross_entropy_loss_grad
func.func @all_extensions(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>)
      sum_exp_logits(%se : memref<8xf32>) -> input_grad_out(%gx : memref<8x16xbf16>)
      weight_grad_out(%gw : memref<256x16xbf16>) {label_smoothing = 0.1 : f64, vocab_size = 1000 : i64, z_loss = 1.0e-04 : f64, softcap = 30.0 : f64}
  func.return
}

// -----

// softmax_is_logits (the kept logits made into P in the nest) needs both statistics.
func.func @kept_logits_without_statistics(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %z: memref<8x256xf32>, %lm: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'softmax_is_logits' makes P from the logits in 'softmax' and the statistics: needs operands 'softmax', 'logits_max' and 'sum_exp_logits', missing 'sum_exp_logits'}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) softmax(%z : memref<8x256xf32>)
      -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>) {softmax_is_logits = true}
  func.return
}

// -----

// ... and the logits: with the statistics alone it is memory-saving mode, which has no logits to take.
func.func @kept_logits_without_logits(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'softmax_is_logits' makes P from the logits in 'softmax' and the statistics: needs operands 'softmax', 'logits_max' and 'sum_exp_logits', missing 'softmax'}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>) {softmax_is_logits = true}
  func.return
}

// -----

// A softmax is float32; kept logits may be in the input's dtype (rounded), no other.
func.func @narrow_softmax(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %p: memref<8x256xbf16>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax' must have dtype float32, got bfloat16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) softmax(%p : memref<8x256xbf16>)
      -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// -----

func.func @kept_logits_in_another_dtype(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %z: memref<8x256xf16>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax' must have dtype float32 or bfloat16, got float16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf16>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true}
  func.return
}

// -----

// Valid: bfloat16 logits kept, with both statistics; printed back with the property.
// CHECK-LABEL: func.func @kept_narrow_logits
// CHECK: softmax(%{{.*}} : memref<8x256xbf16>) -> input_grad_out{{.*}}softmax_is_logits = true
func.func @kept_narrow_logits(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %z: memref<8x256xbf16>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xbf16>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true}
  func.return
}

// -----

// logits_block (compact kept logits, E = exp(Z − C) in float16 with C per block of B
// columns) must be in [0, 65536]; 0 is off.
func.func @compact_negative_block(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xf16>, %c: memref<8x6xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'logits_block' must be in [0, 65536] (0: off), got -1}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf16>) softmax_block_max(%c : memref<8x6xf32>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true, logits_block = -1 : i64}
  func.return
}

// -----

// ... and at most 2^16.
func.func @compact_huge_block(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xf16>, %c: memref<8x1xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'logits_block' must be in [0, 65536] (0: off), got 65537}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf16>) softmax_block_max(%c : memref<8x1xf32>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true, logits_block = 65537 : i64}
  func.return
}

// -----

// Compact logits are kept logits: logits_block needs softmax_is_logits (a softmax is no logits).
func.func @compact_without_kept_logits(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xf32>, %c: memref<8x6xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'logits_block' = 48 reads compact kept logits: needs property 'softmax_is_logits'}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf32>) softmax_block_max(%c : memref<8x6xf32>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {logits_block = 48 : i64}
  func.return
}

// -----

// Compact logits are float16, whatever the input's dtype.
func.func @compact_bf16_logits(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xbf16>, %c: memref<8x6xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax' must have dtype float16, got bfloat16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xbf16>) softmax_block_max(%c : memref<8x6xf32>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true, logits_block = 48 : i64}
  func.return
}

// -----

// Compact logits need their block maxima C.
func.func @compact_without_block_max(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xf16>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op property 'logits_block' = 48 keeps the logits compact: needs operand 'softmax_block_max' (each block's row maximum)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf16>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true, logits_block = 48 : i64}
  func.return
}

// -----

// Block maxima without logits_block (plain kept logits).
func.func @block_max_without_compact(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xbf16>, %c: memref<8x6xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax_block_max' holds the compact logits' block maxima: needs property 'logits_block' > 0}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xbf16>) softmax_block_max(%c : memref<8x6xf32>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true}
  func.return
}

// -----

// The block maxima are float32...
func.func @block_max_f16(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xf16>, %c: memref<8x6xf16>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax_block_max' must have dtype float32, got float16}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf16>) softmax_block_max(%c : memref<8x6xf16>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true, logits_block = 48 : i64}
  func.return
}

// -----

// ... of rank 2...
func.func @block_max_rank1(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xf16>, %c: memref<48xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax_block_max' must have rank 2, got rank 1 (48,)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf16>) softmax_block_max(%c : memref<48xf32>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true, logits_block = 48 : i64}
  func.return
}

// -----

// ... and shape (BT, ceil(V/B)): ceil(256/48) = 6, the last block partial.
func.func @block_max_shape(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xf16>, %c: memref<8x5xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // expected-error@+1 {{'train.fused_linear_cross_entropy_loss_grad' op operand 'softmax_block_max' must have shape (BT, ceil(V/48)) = (8, 6), got (8, 5)}}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf16>) softmax_block_max(%c : memref<8x5xf32>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true, logits_block = 48 : i64}
  func.return
}

// -----

// Valid: compact kept logits (float16 E, float32 C) with both statistics; printed back with the
// properties.
// CHECK-LABEL: func.func @kept_compact_logits
// CHECK: softmax(%{{.*}} : memref<8x256xf16>) softmax_block_max(%{{.*}} : memref<8x6xf32>) -> input_grad_out{{.*}}{softmax_is_logits = true, logits_block = 48 : i64}
func.func @kept_compact_logits(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>, %z: memref<8x256xf16>, %c: memref<8x6xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>)
      masked_target(%t : memref<8xi64>) logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf16>) softmax_block_max(%c : memref<8x6xf32>) -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true, logits_block = 48 : i64}
  func.return
}
