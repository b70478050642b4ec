// One chunk per reject rule of train.fused_linear_online_max_sum (FORWARD.md §1, §4): the error
// names the op and the operand or property at fault, at the op's line. Chunks without an
// expected-error are valid edge cases; FileCheck sees them printed.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// input must have rank 2
func.func @case0(%x: memref<128xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'input' must have rank 2, got rank 1 (128,)}}
  train.fused_linear_online_max_sum input(%x : memref<128xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// weight must have rank 2
func.func @case1(%x: memref<8x16xbf16>, %w: memref<2x128x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'weight' must have rank 2, got rank 3 (2, 128, 16)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<2x128x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// target must have rank 1
func.func @case2(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8x1xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'target' must have rank 1, got rank 2 (8, 1)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8x1xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// input must be a float dtype of the family
func.func @case3(%x: memref<8x16xf64>, %w: memref<256x16xf64>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'input' must have dtype float32, float16 or bfloat16, got f64}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xf64>) weight(%w : memref<256x16xf64>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// weight has input's dtype
func.func @case4(%x: memref<8x16xbf16>, %w: memref<256x16xf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'weight' must have the dtype of 'input' (bfloat16), got float16}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// target is int32 or int64
func.func @case5(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xui8>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xui8>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'target' must have dtype int32 or int64, got uint8}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xui8>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xui8>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// weight's H is input's H
func.func @case6(%x: memref<8x16xbf16>, %w: memref<256x32xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'weight' must have H (input.shape[1]) = 16 in dimension 1, got shape (256, 32)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x32xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// one target per row
func.func @case7(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<7xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'target' must have shape (BT,) = (8,), got (7,)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<7xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// vocab_start_index >= 0
func.func @case8(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op property 'vocab_start_index' must be >= 0, got -1}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = -1 : i64, vocab_end_index = 255 : i64}
  func.return
}

// -----

// the shard's range is V wide
func.func @case9(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op property 'vocab_end_index' - 'vocab_start_index' must be V = weight.shape[0] = 256, got 1200 - 1000 = 200}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 1000 : i64, vocab_end_index = 1200 : i64}
  func.return
}

// -----

// an empty shard
func.func @case10(%x: memref<8x16xbf16>, %w: memref<0x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'weight' must have at least one row (V > 0)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<0x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 0 : i64}
  func.return
}

// -----

// statistics are float32
func.func @case11(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xbf16>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'logits_max_local_out' must have dtype float32, got bfloat16}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xbf16>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// sum_exp_logits_local_out has one entry per row
func.func @case12(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<9xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'sum_exp_logits_local_out' must have shape (BT,) = (8,), got (9,)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<9xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// predicted_logits_local_out has one entry per row
func.func @case13(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<16xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'predicted_logits_local_out' must have shape (BT,) = (8,), got (16,)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<16xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// the mask is packed bytes
func.func @case14(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xi8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'target_mask_out' must have dtype uint8, got i8}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xi8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// the mask has ceil(BT/8) bytes
func.func @case15(%x: memref<20x16xbf16>, %w: memref<256x16xbf16>, %t: memref<20xi64>, %m: memref<20xf32>, %s: memref<20xf32>, %p: memref<20xf32>, %mask: memref<2xui8>, %mt: memref<20xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'target_mask_out' must have shape (ceil(BT/8),) = (3,), got (2,)}}
  train.fused_linear_online_max_sum input(%x : memref<20x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<20xi64>) -> logits_max_local_out(%m : memref<20xf32>)
      sum_exp_logits_local_out(%s : memref<20xf32>) predicted_logits_local_out(%p : memref<20xf32>)
      target_mask_out(%mask : memref<2xui8>) masked_target_out(%mt : memref<20xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// masked_target_out has target's dtype
func.func @case16(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'masked_target_out' must have the dtype of 'target' (int64), got int32}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// masked_target_out has one entry per row
func.func @case17(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<4xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'masked_target_out' must have shape (BT,) = (8,), got (4,)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<4xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// the logits have input's dtype (the vendor's; float32 only with float32_logits, below)
func.func @case18(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xf32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'vocab_parallel_logits_out' must have the dtype of 'input' (bfloat16), got float32}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// with float32_logits (the extension) the logits are float32, whatever the input's dtype
func.func @case18b(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xbf16>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'vocab_parallel_logits_out' must have dtype float32, got bfloat16}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xbf16>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, float32_logits = true}
  func.return
}

// -----

// the logits are (BT, V)
func.func @case19(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x255xbf16>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'vocab_parallel_logits_out' must have shape (BT, V) = (8, 256), got (8, 255)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x255xbf16>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// sum_logits_local_out is float32
func.func @case20(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %sz: memref<8xf16>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'sum_logits_local_out' must have dtype float32, got float16}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) sum_logits_local_out(%sz : memref<8xf16>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// sum_logits_local_out has one entry per row
func.func @case21(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %sz: memref<7xf32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'sum_logits_local_out' must have shape (BT,) = (8,), got (7,)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) sum_logits_local_out(%sz : memref<7xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// softcap >= 0
func.func @case22(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op property 'softcap' must be finite and >= 0 (0: off), got -1.0}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, softcap = -1.0 : f64}
  func.return
}

// -----

// softcap is finite
func.func @case23(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op property 'softcap' must be finite and >= 0 (0: off), got inf}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, softcap = 0x7FF0000000000000 : f64}
  func.return
}

// -----

// dynamic shapes are checked at launch (valid)
// CHECK-LABEL: func.func @case24
// CHECK: train.fused_linear_online_max_sum
func.func @case24(%x: memref<?x?xf32>, %w: memref<?x?xf32>, %t: memref<?xi32>, %m: memref<?xf32>, %s: memref<?xf32>, %p: memref<?xf32>, %mask: memref<?xui8>, %mt: memref<?xi32>) {
  train.fused_linear_online_max_sum input(%x : memref<?x?xf32>) weight(%w : memref<?x?xf32>)
      target(%t : memref<?xi32>) -> logits_max_local_out(%m : memref<?xf32>)
      sum_exp_logits_local_out(%s : memref<?xf32>) predicted_logits_local_out(%p : memref<?xf32>)
      target_mask_out(%mask : memref<?xui8>) masked_target_out(%mt : memref<?xi32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// an empty batch (valid)
// CHECK-LABEL: func.func @case25
// CHECK: train.fused_linear_online_max_sum
func.func @case25(%x: memref<0x16xbf16>, %w: memref<256x16xbf16>, %t: memref<0xi64>, %m: memref<0xf32>, %s: memref<0xf32>, %p: memref<0xf32>, %mask: memref<0xui8>, %mt: memref<0xi64>) {
  train.fused_linear_online_max_sum input(%x : memref<0x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<0xi64>) -> logits_max_local_out(%m : memref<0xf32>)
      sum_exp_logits_local_out(%s : memref<0xf32>) predicted_logits_local_out(%p : memref<0xf32>)
      target_mask_out(%mask : memref<0xui8>) masked_target_out(%mt : memref<0xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// every option (valid)
// CHECK-LABEL: func.func @case26
// CHECK: train.fused_linear_online_max_sum
func.func @case26(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xbf16>, %sz: memref<8xf32>) {
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xbf16>) sum_logits_local_out(%sz : memref<8xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, softcap = 30.0 : f64, ignore_index = -100 : i64}
  func.return
}

// -----

// logits_block in [0, 65536] (compact kept logits, the extension: 0 is off)
func.func @case27(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op property 'logits_block' must be in [0, 65536] (0: off), got -1}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = -1 : i64}
  func.return
}

// -----

// logits_block <= 65536 (2^16)
func.func @case27b(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xf16>, %c: memref<8x1xf32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op property 'logits_block' must be in [0, 65536] (0: off), got 65537}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xf16>) logits_block_max_out(%c : memref<8x1xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = 65537 : i64}
  func.return
}

// -----

// compact logits need their block maxima
func.func @case28(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xf16>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op property 'logits_block' = 48 keeps the logits compact: needs operand 'logits_block_max_out' (each block's row maximum)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xf16>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = 48 : i64}
  func.return
}

// -----

// compact logits need the logits output
func.func @case29(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %c: memref<8x6xf32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op property 'logits_block' = 48 keeps the logits compact: needs operand 'vocab_parallel_logits_out'}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) logits_block_max_out(%c : memref<8x6xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = 48 : i64}
  func.return
}

// -----

// block maxima without logits_block
func.func @case30(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xbf16>, %c: memref<8x6xf32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'logits_block_max_out' holds the compact logits' block maxima: needs property 'logits_block' > 0}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xbf16>) logits_block_max_out(%c : memref<8x6xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64}
  func.return
}

// -----

// logits_block and float32_logits exclude each other
func.func @case31(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xf16>, %c: memref<8x6xf32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op properties 'logits_block' and 'float32_logits' exclude each other (compact or float32 logits)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xf16>) logits_block_max_out(%c : memref<8x6xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, float32_logits = true, logits_block = 48 : i64}
  func.return
}

// -----

// compact logits are float16 (not the input's dtype)
func.func @case32(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xbf16>, %c: memref<8x6xf32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'vocab_parallel_logits_out' must have dtype float16, got bfloat16}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xbf16>) logits_block_max_out(%c : memref<8x6xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = 48 : i64}
  func.return
}

// -----

// the block maxima have rank 2
func.func @case33(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xf16>, %c: memref<48xf32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'logits_block_max_out' must have rank 2, got rank 1 (48,)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xf16>) logits_block_max_out(%c : memref<48xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = 48 : i64}
  func.return
}

// -----

// the block maxima are float32
func.func @case34(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xf16>, %c: memref<8x6xf16>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'logits_block_max_out' must have dtype float32, got float16}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xf16>) logits_block_max_out(%c : memref<8x6xf16>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = 48 : i64}
  func.return
}

// -----

// the block maxima are (BT, ceil(V/B)): ceil(256/48) = 6 blocks, the last partial
func.func @case35(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xf16>, %c: memref<8x5xf32>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'logits_block_max_out' must have shape (BT, ceil(V/48)) = (8, 6), got (8, 5)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xf16>) logits_block_max_out(%c : memref<8x5xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = 48 : i64}
  func.return
}

// -----

// compact logits, a partial last block (valid; printed back with the property)
// CHECK-LABEL: func.func @case36
// CHECK: vocab_parallel_logits_out(%{{.*}} : memref<8x256xf16>) logits_block_max_out(%{{.*}} : memref<8x6xf32>) {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = 48 : i64}
func.func @case36(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>, %z: memref<8x256xf16>, %c: memref<8x6xf32>) {
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>) vocab_parallel_logits_out(%z : memref<8x256xf16>) logits_block_max_out(%c : memref<8x6xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 256 : i64, logits_block = 48 : i64}
  func.return
}

// -----

// the shard at run time (the extension vocab_range, int64 [start, end]) instead of the
// properties (valid; printed back with the operand and without them)
// CHECK-LABEL: func.func @case37
// CHECK: target(%{{.*}} : memref<8xi64>) vocab_range(%{{.*}} : memref<2xi64>) -> logits_max_local_out(
// CHECK-NOT: vocab_start_index
// CHECK: func.return
func.func @case37(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %r: memref<2xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) vocab_range(%r : memref<2xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
  func.return
}

// -----

// the shard twice: as the properties and as vocab_range
func.func @case38(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %r: memref<2xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op takes the shard from the properties 'vocab_start_index' and 'vocab_end_index' or from operand 'vocab_range', not both}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) vocab_range(%r : memref<2xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64}
  func.return
}

// -----

// no shard: neither the properties nor vocab_range
func.func @case39(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op needs the property 'vocab_end_index' (or operand 'vocab_range' instead of both)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
      {vocab_start_index = 0 : i64}
  func.return
}

// -----

// vocab_range is int64 [start, end]
func.func @case40(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %r: memref<3xi64>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'vocab_range' must have shape (2,) (start, end), got (3,)}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) vocab_range(%r : memref<3xi64>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
  func.return
}

// -----

func.func @case41(%x: memref<8x16xbf16>, %w: memref<256x16xbf16>, %t: memref<8xi64>, %r: memref<2xi32>, %m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %mask: memref<1xui8>, %mt: memref<8xi64>) {
  // expected-error@+1 {{'train.fused_linear_online_max_sum' op operand 'vocab_range' must have dtype int64, got int32}}
  train.fused_linear_online_max_sum input(%x : memref<8x16xbf16>) weight(%w : memref<256x16xbf16>)
      target(%t : memref<8xi64>) vocab_range(%r : memref<2xi32>) -> logits_max_local_out(%m : memref<8xf32>)
      sum_exp_logits_local_out(%s : memref<8xf32>) predicted_logits_local_out(%p : memref<8xf32>)
      target_mask_out(%mask : memref<1xui8>) masked_target_out(%mt : memref<8xi64>)
  func.return
}
