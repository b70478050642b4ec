// One chunk per reject rule of train.fused_cross_entropy_loss_with_max_sum (FORWARD.md §2, §4): the error
// names the op and the operand or property at fault, at the op's line. Chunks without an
// expected-error are valid edge cases; FileCheck sees them printed.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// statistics have rank 1
func.func @case0(%m: memref<8x1xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'logits_max' must have rank 1, got rank 2 (8, 1)}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8x1xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>)
  func.return
}

// -----

// the loss is float32
func.func @case1(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %l: memref<8xbf16>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'loss_out' must have dtype float32, got bfloat16}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<8xbf16>)
  func.return
}

// -----

// statistics are float32
func.func @case2(%m: memref<8xf32>, %s: memref<8xf16>, %p: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'sum_exp_logits' must have dtype float32, got float16}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf16>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>)
  func.return
}

// -----

// one sum per row
func.func @case3(%m: memref<8xf32>, %s: memref<9xf32>, %p: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'sum_exp_logits' must have shape (BT,) = (8,), got (9,)}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<9xf32>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>)
  func.return
}

// -----

// one loss per row
func.func @case4(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %l: memref<4xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'loss_out' must have shape (BT,) = (8,), got (4,)}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<4xf32>)
  func.return
}

// -----

// logits without softmax_out
func.func @case5(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %z: memref<8x256xbf16>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op needs both operands 'vocab_parallel_logits' and 'softmax_out', or neither}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      vocab_parallel_logits(%z : memref<8x256xbf16>)
      -> loss_out(%l : memref<8xf32>)
  func.return
}

// -----

// softmax_out without logits
func.func @case6(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %l: memref<8xf32>, %sm: memref<8x256xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op needs both operands 'vocab_parallel_logits' and 'softmax_out', or neither}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>) softmax_out(%sm : memref<8x256xf32>)
  func.return
}

// -----

// logits have rank 2
func.func @case7(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %z: memref<2048xbf16>, %l: memref<8xf32>, %sm: memref<8x256xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'vocab_parallel_logits' must have rank 2, got rank 1 (2048,)}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      vocab_parallel_logits(%z : memref<2048xbf16>)
      -> loss_out(%l : memref<8xf32>) softmax_out(%sm : memref<8x256xf32>)
  func.return
}

// -----

// logits are a float dtype of the family
func.func @case8(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %z: memref<8x256xf64>, %l: memref<8xf32>, %sm: memref<8x256xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'vocab_parallel_logits' must have dtype float32, float16 or bfloat16, got f64}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      vocab_parallel_logits(%z : memref<8x256xf64>)
      -> loss_out(%l : memref<8xf32>) softmax_out(%sm : memref<8x256xf32>)
  func.return
}

// -----

// logits have BT rows
func.func @case9(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %z: memref<9x256xbf16>, %l: memref<8xf32>, %sm: memref<8x256xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'vocab_parallel_logits' must have BT (logits_max.shape[0]) = 8 in dimension 0, got shape (9, 256)}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      vocab_parallel_logits(%z : memref<9x256xbf16>)
      -> loss_out(%l : memref<8xf32>) softmax_out(%sm : memref<8x256xf32>)
  func.return
}

// -----

// softmax_out is float32
func.func @case10(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %z: memref<8x256xbf16>, %l: memref<8xf32>, %sm: memref<8x256xbf16>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'softmax_out' must have dtype float32, got bfloat16}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      vocab_parallel_logits(%z : memref<8x256xbf16>)
      -> loss_out(%l : memref<8xf32>) softmax_out(%sm : memref<8x256xbf16>)
  func.return
}

// -----

// softmax_out is (BT, V)
func.func @case11(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %z: memref<8x256xbf16>, %l: memref<8xf32>, %sm: memref<8x128xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'softmax_out' must have shape (BT, V) = (8, 256), got (8, 128)}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      vocab_parallel_logits(%z : memref<8x256xbf16>)
      -> loss_out(%l : memref<8xf32>) softmax_out(%sm : memref<8x128xf32>)
  func.return
}

// -----

// label_smoothing in [0, 1]
func.func @case12(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %sz: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op property 'label_smoothing' must be in [0, 1], got 1.5}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>) sum_logits(%sz : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>) {label_smoothing = 1.5 : f64, vocab_size = 1000 : i64}
  func.return
}

// -----

// label smoothing needs the global vocabulary
func.func @case13(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %sz: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op property 'label_smoothing' = 0.1 needs 'vocab_size', the global vocabulary K (>= 1), got 0}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>) sum_logits(%sz : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>) {label_smoothing = 0.1 : f64}
  func.return
}

// -----

// the global vocabulary is at least a shard's
func.func @case14(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %z: memref<8x256xbf16>, %sz: memref<8xf32>, %l: memref<8xf32>, %sm: memref<8x256xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op property 'label_smoothing' = 0.1 needs 'vocab_size', the global vocabulary K (>= V = 256), got 100}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      vocab_parallel_logits(%z : memref<8x256xbf16>) sum_logits(%sz : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>) softmax_out(%sm : memref<8x256xf32>) {label_smoothing = 0.1 : f64, vocab_size = 100 : i64}
  func.return
}

// -----

// vocab_size >= 0
func.func @case15(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op property 'vocab_size' must be >= 0, got -1}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>) {vocab_size = -1 : i64}
  func.return
}

// -----

// z_loss >= 0
func.func @case16(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op property 'z_loss' must be finite and >= 0 (0: off), got -0.5}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>) {z_loss = -0.5 : f64}
  func.return
}

// -----

// label smoothing needs sum_logits
func.func @case17(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op property 'label_smoothing' needs operand 'sum_logits' (the global Σ of the logits)}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>) {label_smoothing = 0.1 : f64, vocab_size = 1000 : i64}
  func.return
}

// -----

// sum_logits is float32
func.func @case18(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %sz: memref<8xbf16>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'sum_logits' must have dtype float32, got bfloat16}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>) sum_logits(%sz : memref<8xbf16>)
      -> loss_out(%l : memref<8xf32>)
  func.return
}

// -----

// sum_logits has one entry per row
func.func @case19(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %sz: memref<3xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'sum_logits' must have shape (BT,) = (8,), got (3,)}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>) sum_logits(%sz : memref<3xf32>)
      -> loss_out(%l : memref<8xf32>)
  func.return
}

// -----

// ignore_index without target
func.func @case20(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op property 'ignore_index' and operand 'target' go together (the rows to ignore), got only the property}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>) {ignore_index = -100 : i64}
  func.return
}

// -----

// target without ignore_index
func.func @case21(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %t: memref<8xi64>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op property 'ignore_index' and operand 'target' go together (the rows to ignore), got only the operand}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>) target(%t : memref<8xi64>)
      -> loss_out(%l : memref<8xf32>)
  func.return
}

// -----

// target is int32 or int64
func.func @case22(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %t: memref<8xf32>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'target' must have dtype int32 or int64, got float32}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>) target(%t : memref<8xf32>)
      -> loss_out(%l : memref<8xf32>) {ignore_index = -100 : i64}
  func.return
}

// -----

// target has one entry per row
func.func @case23(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %t: memref<5xi64>, %l: memref<8xf32>) {
  // expected-error@+1 {{'train.fused_cross_entropy_loss_with_max_sum' op operand 'target' must have shape (BT,) = (8,), got (5,)}}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>) target(%t : memref<5xi64>)
      -> loss_out(%l : memref<8xf32>) {ignore_index = -100 : i64}
  func.return
}

// -----

// every option (valid)
// CHECK-LABEL: func.func @case24
// CHECK: train.fused_cross_entropy_loss_with_max_sum
func.func @case24(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %z: memref<8x256xbf16>, %sz: memref<8xf32>, %t: memref<8xi32>, %l: memref<8xf32>, %sm: memref<8x256xf32>) {
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>) predicted_logits(%p : memref<8xf32>)
      vocab_parallel_logits(%z : memref<8x256xbf16>) sum_logits(%sz : memref<8xf32>) target(%t : memref<8xi32>)
      -> loss_out(%l : memref<8xf32>) softmax_out(%sm : memref<8x256xf32>) {label_smoothing = 0.1 : f64, vocab_size = 1000 : i64, z_loss = 1.0e-04 : f64, ignore_index = -100 : i64}
  func.return
}

// -----

// dynamic shapes (valid)
// CHECK-LABEL: func.func @case25
// CHECK: train.fused_cross_entropy_loss_with_max_sum
func.func @case25(%m: memref<?xf32>, %s: memref<?xf32>, %p: memref<?xf32>, %l: memref<?xf32>) {
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<?xf32>) sum_exp_logits(%s : memref<?xf32>) predicted_logits(%p : memref<?xf32>)
      -> loss_out(%l : memref<?xf32>)
  func.return
}
