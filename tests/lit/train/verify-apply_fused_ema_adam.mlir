// One chunk per metadata rule of the spec for train.apply_fused_ema_adam (OPS.md §4.3): the error
// names the op and the operand or property at fault, at the op's line. Chunks without an
// expected-error are valid edge cases; FileCheck sees them printed.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// grad has 1 to 8 dims.
func.func @grad_rank_0(%g: memref<f32>, %step: memref<1xi64>, %var: memref<f32>, %m: memref<f32>,
    %v: memref<f32>, %s: memref<f32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'grad' must have rank 1 to 8, got rank 0 ()}}
  train.apply_fused_ema_adam grad(%g : memref<f32>) step(%step : memref<1xi64>) ->
      var(%var : memref<f32>) m(%m : memref<f32>) v(%v : memref<f32>) s(%s : memref<f32>)
  func.return
}

// -----

// grad has 1 to 8 dims.
func.func @grad_rank_9(%g: memref<1x1x1x1x1x1x1x3x7xf32>, %step: memref<1xi64>,
    %var: memref<1x1x1x1x1x1x1x3x7xf32>, %m: memref<1x1x1x1x1x1x1x3x7xf32>,
    %v: memref<1x1x1x1x1x1x1x3x7xf32>, %s: memref<1x1x1x1x1x1x1x3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'grad' must have rank 1 to 8, got rank 9 (1, 1, 1, 1, 1, 1, 1, 3, 7)}}
  train.apply_fused_ema_adam grad(%g : memref<1x1x1x1x1x1x1x3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<1x1x1x1x1x1x1x3x7xf32>) m(%m : memref<1x1x1x1x1x1x1x3x7xf32>)
      v(%v : memref<1x1x1x1x1x1x1x3x7xf32>) s(%s : memref<1x1x1x1x1x1x1x3x7xf32>)
  func.return
}

// -----

// The tensors are float32, float16 or bfloat16.
func.func @grad_dtype(%g: memref<3x7xf64>, %step: memref<1xi64>, %var: memref<3x7xf64>,
    %m: memref<3x7xf64>, %v: memref<3x7xf64>, %s: memref<3x7xf64>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'grad' must have dtype float32, float16 or bfloat16, got f64}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf64>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf64>) m(%m : memref<3x7xf64>) v(%v : memref<3x7xf64>)
      s(%s : memref<3x7xf64>)
  func.return
}

// -----

// var has grad's dtype.
func.func @var_dtype(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xbf16>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'var' must have the dtype of 'grad' (float32), got bfloat16}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xbf16>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// m has grad's dtype.
func.func @m_dtype(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf16>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'm' must have the dtype of 'grad' (float32), got float16}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf16>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// v has grad's dtype.
func.func @v_dtype(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xbf16>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'v' must have the dtype of 'grad' (float32), got bfloat16}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xbf16>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// s has grad's dtype.
func.func @s_dtype(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf16>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 's' must have the dtype of 'grad' (float32), got float16}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf16>)
  func.return
}

// -----

// var has grad's shape.
func.func @var_shape(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<7x3xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'var' must have shape (3, 7) (the shape of 'grad'), got (7, 3)}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<7x3xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// m has grad's shape.
func.func @m_shape(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<21xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'm' must have shape (3, 7) (the shape of 'grad'), got (21,)}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<21xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// v has grad's shape.
func.func @v_shape(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x8xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'v' must have shape (3, 7) (the shape of 'grad'), got (3, 8)}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x8xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// s has grad's shape.
func.func @s_shape(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7x1xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 's' must have shape (3, 7) (the shape of 'grad'), got (3, 7, 1)}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7x1xf32>)
  func.return
}

// -----

// step is int64.
func.func @step_dtype(%g: memref<3x7xf32>, %step: memref<1xi32>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'step' must have dtype int64, got int32}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi32>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// step is int64 (not a float count).
func.func @step_float(%g: memref<3x7xf32>, %step: memref<1xf32>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'step' must have dtype int64, got float32}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xf32>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// step has exactly one element (the kernel reads element 0 only).
func.func @step_numel(%g: memref<3x7xf32>, %step: memref<2xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'step' must have exactly one element, got shape (2,)}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<2xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// step has exactly one element: not the vendor sample's (2, 2).
func.func @step_2x2(%g: memref<3x7xf32>, %step: memref<2x2xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'step' must have exactly one element, got shape (2, 2)}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<2x2xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// mode is 0 (L2, Adam) or 1 (decoupled decay, AdamW): the kernel has no third branch.
func.func @mode_2(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'mode' must be 0 (L2, Adam) or 1 (decoupled decay, AdamW), got 2}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {mode = 2 : i64}
  func.return
}

// -----

// mode is 0 or 1.
func.func @mode_negative(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'mode' must be 0 (L2, Adam) or 1 (decoupled decay, AdamW), got -1}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {mode = -1 : i64}
  func.return
}

// -----

// lr >= 0.
func.func @lr_negative(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'lr' must be >= 0, got -0.001}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {lr = -1.0e-03 : f64}
  func.return
}

// -----

// lr >= 0 (NaN is not).
func.func @lr_nan(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'lr' must be >= 0, got nan}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {lr = 0x7FF8000000000000 : f64}
  func.return
}

// -----

// eps >= 0.
func.func @eps_negative(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'eps' must be >= 0, got -1e-08}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {eps = -1.0e-08 : f64}
  func.return
}

// -----

// 0 <= beta1 < 1.
func.func @beta1_one(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'beta1' must be in [0, 1) as a float32, got 1.0}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {beta1 = 1.0 : f64}
  func.return
}

// -----

// beta1 below 1 as a double but 1.0 as a float32 (the kernel's precision: bias correction 1 - 1^k = 0).
func.func @beta1_float32_one(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'beta1' must be in [0, 1) as a float32, got 0.99999999}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {beta1 = 0.99999999 : f64}
  func.return
}

// -----

// 0 <= beta1 < 1.
func.func @beta1_negative(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'beta1' must be in [0, 1) as a float32, got -0.1}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {beta1 = -0.1 : f64}
  func.return
}

// -----

// 0 <= beta2 < 1.
func.func @beta2_one(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'beta2' must be in [0, 1) as a float32, got 1.5}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {beta2 = 1.5 : f64}
  func.return
}

// -----

// weightDecay >= 0.
func.func @weight_decay_negative(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'weight_decay' must be >= 0, got -0.01}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {weight_decay = -0.01 : f64}
  func.return
}

// -----

// emaDecay is a weight in [0, 1].
func.func @ema_decay(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op property 'ema_decay' must be in [0, 1], got 1.01}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {ema_decay = 1.01 : f64}
  func.return
}

// -----

// The boundary values are accepted: beta1 = beta2 = 0, lr = eps = 0, emaDecay = 1.
func.func @boundaries(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
      {lr = 0.0 : f64, ema_decay = 1.0 : f64, beta1 = 0.0 : f64, beta2 = 0.0 : f64, eps = 0.0 : f64}
  func.return
}
// CHECK: func.func @boundaries

// -----

// mode is an i64.
func.func @mode_type(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op Expected attribute i64 but got i32}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>) {mode = 1 : i32}
  func.return
}

// -----

// The run-time hyperparameters are float32...
func.func @hyperparameters_dtype(%g: memref<3x7xf32>, %step: memref<1xi64>, %h: memref<6xf64>,
    %var: memref<3x7xf32>, %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'hyperparameters' must have dtype float32, got f64}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>)
      hyperparameters(%h : memref<6xf64>) -> var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>)
      v(%v : memref<3x7xf32>) s(%s : memref<3x7xf32>)
  func.return
}

// -----

// ...[lr, ema_decay, beta1, beta2, eps, weight_decay]...
func.func @hyperparameters_length(%g: memref<3x7xf32>, %step: memref<1xi64>, %h: memref<5xf32>,
    %var: memref<3x7xf32>, %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'hyperparameters' must have shape (6,) (lr, ema_decay, beta1, beta2, eps, weight_decay), got (5,)}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>)
      hyperparameters(%h : memref<5xf32>) -> var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>)
      v(%v : memref<3x7xf32>) s(%s : memref<3x7xf32>)
  func.return
}

// -----

// ...as a vector.
func.func @hyperparameters_rank(%g: memref<3x7xf32>, %step: memref<1xi64>, %h: memref<2x3xf32>,
    %var: memref<3x7xf32>, %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'hyperparameters' must have shape (6,) (lr, ema_decay, beta1, beta2, eps, weight_decay), got (2, 3)}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>)
      hyperparameters(%h : memref<2x3xf32>) -> var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>)
      v(%v : memref<3x7xf32>) s(%s : memref<3x7xf32>)
  func.return
}

// -----

// Operands are memrefs.
func.func @tensor_operand(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: tensor<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'v' must be a memref, got tensor<3x7xf32>}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : tensor<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// Operands are memrefs.
func.func @scalar_step(%g: memref<3x7xf32>, %step: i64, %var: memref<3x7xf32>, %m: memref<3x7xf32>,
    %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'step' must be a memref, got i64}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : i64) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32>)
  func.return
}

// -----

// Operands are plain arrays: identity or strided layouts only.
func.func @blocked_layout(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32, affine_map<(d0, d1) -> (d0, d1 floordiv 4, d1 mod 4)>>,
    %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 'm' must have an identity or strided layout, got memref<3x7xf32, affine_map<}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>)
      m(%m : memref<3x7xf32, affine_map<(d0, d1) -> (d0, d1 floordiv 4, d1 mod 4)>>)
      v(%v : memref<3x7xf32>) s(%s : memref<3x7xf32>)
  func.return
}

// -----

// Operands live in the default memory space.
func.func @memory_space(%g: memref<3x7xf32>, %step: memref<1xi64>, %var: memref<3x7xf32>,
    %m: memref<3x7xf32>, %v: memref<3x7xf32>, %s: memref<3x7xf32, 1>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op operand 's' must be in global (default) memory or a local level (#npu.mem<level>), got memref<3x7xf32, 1 : i64>}}
  train.apply_fused_ema_adam grad(%g : memref<3x7xf32>) step(%step : memref<1xi64>) ->
      var(%var : memref<3x7xf32>) m(%m : memref<3x7xf32>) v(%v : memref<3x7xf32>)
      s(%s : memref<3x7xf32, 1>)
  func.return
}

// -----

// step is required: only the generic form can omit it.
func.func @missing_step(%g: memref<3x7xf32>, %var: memref<3x7xf32>, %m: memref<3x7xf32>,
    %v: memref<3x7xf32>, %s: memref<3x7xf32>) {
  // expected-error@+1 {{'train.apply_fused_ema_adam' op expected 1 value for step, but got 0}}
  "train.apply_fused_ema_adam"(%g, %var, %m, %v, %s) <{operandSegmentSizes = array<i32: 1, 0, 0, 1, 1, 1, 1>}>
      : (memref<3x7xf32>, memref<3x7xf32>, memref<3x7xf32>, memref<3x7xf32>, memref<3x7xf32>) -> ()
  func.return
}
