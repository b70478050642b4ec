// Every op of the train dialect prints, parses and prints again to the same text.
// RUN: npugrad-opt %s | npugrad-opt | FileCheck %s
// The generic form parses back to the custom form.
// RUN: npugrad-opt %s --print-op-generic | npugrad-opt | FileCheck %s

// CHECK-LABEL: func.func @flce_memory_saving
func.func @flce_memory_saving(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // CHECK: train.fused_linear_cross_entropy_loss_grad grad(%{{.*}} : memref<8xf32>) input(%{{.*}} : memref<8x16xbf16>) weight(%{{.*}} : memref<256x16xbf16>) target_mask(%{{.*}} : memref<1xui8>) masked_target(%{{.*}} : memref<8xi64>) logits_max(%{{.*}} : memref<8xf32>) sum_exp_logits(%{{.*}} : memref<8xf32>) -> input_grad_out(%{{.*}} : memref<8x16xbf16>) weight_grad_out(%{{.*}} : memref<256x16xbf16>)
  // CHECK-NOT: softmax
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>) masked_target(%t : memref<8xi64>)
      logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
  func.return
}

// CHECK-LABEL: func.func @flce_high_performance
func.func @flce_high_performance(%g: memref<?xf32>, %x: memref<?x?xf16>, %w: memref<?x?xf16>,
    %mask: memref<?xi1>, %t: memref<?xi32>, %p: memref<?x?xf32>, %gx: memref<?x?xf16>, %gw: memref<?x?xf16>) {
  // CHECK: target_mask(%{{.*}} : memref<?xi1>) masked_target(%{{.*}} : memref<?xi32>) softmax(%{{.*}} : memref<?x?xf32>) -> input_grad_out
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<?xf32>) input(%x : memref<?x?xf16>)
      weight(%w : memref<?x?xf16>) target_mask(%mask : memref<?xi1>) masked_target(%t : memref<?xi32>)
      softmax(%p : memref<?x?xf32>) -> input_grad_out(%gx : memref<?x?xf16>) weight_grad_out(%gw : memref<?x?xf16>)
  func.return
}

// CHECK-LABEL: func.func @embedding
func.func @embedding(%g: memref<4x5x32xf32>, %i: memref<4x5xi32>, %out: memref<100x32xf32>) {
  // CHECK: train.embedding_dense_backward grad(%{{.*}} : memref<4x5x32xf32>) indices(%{{.*}} : memref<4x5xi32>) -> out(%{{.*}} : memref<100x32xf32>) {num_weights = 100 : i64, padding_idx = 3 : i64, scale_grad_by_freq = true}
  train.embedding_dense_backward grad(%g : memref<4x5x32xf32>) indices(%i : memref<4x5xi32>)
      -> out(%out : memref<100x32xf32>) {num_weights = 100 : i64, padding_idx = 3 : i64, scale_grad_by_freq = true}
  func.return
}

// CHECK-LABEL: func.func @nll
func.func @nll(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xui8>, %w: memref<10xf32>,
    %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // CHECK: train.nll_loss_backward grad_output(%{{.*}} : memref<f32>) self(%{{.*}} : memref<6x10xf32>) target(%{{.*}} : memref<6xui8>) weight(%{{.*}} : memref<10xf32>) total_weight(%{{.*}} : memref<1xf32>) -> out(%{{.*}} : memref<6x10xf32>) {reduction = 2 : i64, ignore_index = 3 : i64}
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>) target(%t : memref<6xui8>)
      weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) -> out(%out : memref<6x10xf32>)
      {reduction = 2 : i64, ignore_index = 3 : i64}
  func.return
}

// CHECK-LABEL: func.func @ema_adam
func.func @ema_adam(%g: memref<3x7xbf16>, %step: memref<1xi64>, %var: memref<3x7xbf16>, %m: memref<3x7xbf16>,
    %v: memref<3x7xbf16>, %s: memref<3x7xbf16>) {
  // CHECK: train.apply_fused_ema_adam grad(%{{.*}} : memref<3x7xbf16>) step(%{{.*}} : memref<1xi64>) -> var(%{{.*}} : memref<3x7xbf16>) m(%{{.*}} : memref<3x7xbf16>) v(%{{.*}} : memref<3x7xbf16>) s(%{{.*}} : memref<3x7xbf16>) {lr = 1.000000e-02 : f64, mode = 0 : i64, bias_correction = false, weight_decay = 1.000000e-01 : f64}
  train.apply_fused_ema_adam grad(%g : memref<3x7xbf16>) step(%step : memref<1xi64>)
      -> var(%var : memref<3x7xbf16>) m(%m : memref<3x7xbf16>) v(%v : memref<3x7xbf16>) s(%s : memref<3x7xbf16>)
      {lr = 0.01 : f64, mode = 0 : i64, bias_correction = false, weight_decay = 0.1 : f64}
  func.return
}

// CHECK-LABEL: func.func @bce
func.func @bce(%x: memref<2x3xf16>, %y: memref<2x3xf16>, %d: memref<2x3xf16>, %w: memref<2x3xf16>, %dx: memref<2x3xf16>) {
  // CHECK: train.binary_cross_entropy_grad input_x(%{{.*}} : memref<2x3xf16>) input_y(%{{.*}} : memref<2x3xf16>) dloss(%{{.*}} : memref<2x3xf16>) weight(%{{.*}} : memref<2x3xf16>) -> dx(%{{.*}} : memref<2x3xf16>) {reduction = 0 : i64}
  train.binary_cross_entropy_grad input_x(%x : memref<2x3xf16>) input_y(%y : memref<2x3xf16>) dloss(%d : memref<2x3xf16>)
      weight(%w : memref<2x3xf16>) -> dx(%dx : memref<2x3xf16>) {reduction = 0 : i64}
  // The optional weight is absent and the default reduction (mean) is elided.
  // CHECK: train.binary_cross_entropy_grad input_x(%{{.*}} : memref<2x3xf16>) input_y(%{{.*}} : memref<2x3xf16>) dloss(%{{.*}} : memref<1xf16>) -> dx(%{{.*}} : memref<2x3xf16>){{$}}
  %one = memref.alloca() : memref<1xf16>
  train.binary_cross_entropy_grad input_x(%x : memref<2x3xf16>) input_y(%y : memref<2x3xf16>) dloss(%one : memref<1xf16>)
      -> dx(%dx : memref<2x3xf16>) {reduction = 1 : i64}
  func.return
}

// Run-time hyper-parameters: [lr, ema_decay, beta1, beta2, eps, weight_decay] as an operand.
// CHECK-LABEL: func.func @ema_adam_runtime_hyperparameters
// CHECK: train.apply_fused_ema_adam grad(%{{.*}} : memref<?xf32>) step(%{{.*}} : memref<1xi64>) hyperparameters(%{{.*}} : memref<6xf32>) -> var(
func.func @ema_adam_runtime_hyperparameters(%g: memref<?xf32>, %step: memref<1xi64>, %h: memref<6xf32>,
    %var: memref<?xf32>, %m: memref<?xf32>, %v: memref<?xf32>, %s: memref<?xf32>) {
  train.apply_fused_ema_adam grad(%g : memref<?xf32>) step(%step : memref<1xi64>) hyperparameters(%h : memref<6xf32>)
      -> var(%var : memref<?xf32>) m(%m : memref<?xf32>) v(%v : memref<?xf32>) s(%s : memref<?xf32>)
  func.return
}

// CHECK-LABEL: func.func @online_max_sum
func.func @online_max_sum(%x: memref<100x48xbf16>, %w: memref<300x48xbf16>, %t: memref<100xi64>,
                          %m: memref<100xf32>, %s: memref<100xf32>, %p: memref<100xf32>,
                          %mask: memref<13xui8>, %mt: memref<100xi64>) {
  // CHECK: train.fused_linear_online_max_sum input(%{{.*}} : memref<100x48xbf16>) weight(%{{.*}} : memref<300x48xbf16>) target(%{{.*}} : memref<100xi64>) -> logits_max_local_out(%{{.*}} : memref<100xf32>) sum_exp_logits_local_out(%{{.*}} : memref<100xf32>) predicted_logits_local_out(%{{.*}} : memref<100xf32>) target_mask_out(%{{.*}} : memref<13xui8>) masked_target_out(%{{.*}} : memref<100xi64>) {vocab_start_index = 1000 : i64, vocab_end_index = 1300 : i64}
  // CHECK-NOT: vocab_parallel_logits_out
  train.fused_linear_online_max_sum input(%x : memref<100x48xbf16>) weight(%w : memref<300x48xbf16>)
      target(%t : memref<100xi64>) -> logits_max_local_out(%m : memref<100xf32>)
      sum_exp_logits_local_out(%s : memref<100xf32>) predicted_logits_local_out(%p : memref<100xf32>)
      target_mask_out(%mask : memref<13xui8>) masked_target_out(%mt : memref<100xi64>)
      {vocab_start_index = 1000 : i64, vocab_end_index = 1300 : i64}
  func.return
}

// The extension float32_logits: bfloat16 input, float32 logits (the default, false, is not printed).
// CHECK-LABEL: func.func @online_max_sum_float32_logits
func.func @online_max_sum_float32_logits(%x: memref<100x48xbf16>, %w: memref<300x48xbf16>, %t: memref<100xi64>,
                                         %m: memref<100xf32>, %s: memref<100xf32>, %p: memref<100xf32>,
                                         %mask: memref<13xui8>, %mt: memref<100xi64>, %z: memref<100x300xf32>) {
  // CHECK: vocab_parallel_logits_out(%{{.*}} : memref<100x300xf32>) {vocab_start_index = 1000 : i64, vocab_end_index = 1300 : i64, float32_logits = true}
  train.fused_linear_online_max_sum input(%x : memref<100x48xbf16>) weight(%w : memref<300x48xbf16>)
      target(%t : memref<100xi64>) -> logits_max_local_out(%m : memref<100xf32>)
      sum_exp_logits_local_out(%s : memref<100xf32>) predicted_logits_local_out(%p : memref<100xf32>)
      target_mask_out(%mask : memref<13xui8>) masked_target_out(%mt : memref<100xi64>)
      vocab_parallel_logits_out(%z : memref<100x300xf32>)
      {vocab_start_index = 1000 : i64, vocab_end_index = 1300 : i64, float32_logits = true}
  func.return
}

// CHECK-LABEL: func.func @online_max_sum_every_option
func.func @online_max_sum_every_option(%x: memref<?x?xf32>, %w: memref<?x?xf32>, %t: memref<?xi32>,
    %m: memref<?xf32>, %s: memref<?xf32>, %p: memref<?xf32>, %mask: memref<?xui8>, %mt: memref<?xi32>,
    %z: memref<?x?xf32>, %sz: memref<?xf32>) {
  // CHECK: masked_target_out(%{{.*}} : memref<?xi32>) vocab_parallel_logits_out(%{{.*}} : memref<?x?xf32>) sum_logits_local_out(%{{.*}} : memref<?xf32>) {vocab_start_index = 0 : i64, vocab_end_index = 64 : i64, softcap = 3.000000e+01 : f64, ignore_index = -100 : i64, tile_sizes = #train.tiles<bt = 32, v = 64>}
  train.fused_linear_online_max_sum input(%x : memref<?x?xf32>) weight(%w : memref<?x?xf32>)
      target(%t : memref<?xi32>) -> logits_max_local_out(%m : memref<?xf32>)
      sum_exp_logits_local_out(%s : memref<?xf32>) predicted_logits_local_out(%p : memref<?xf32>)
      target_mask_out(%mask : memref<?xui8>) masked_target_out(%mt : memref<?xi32>)
      vocab_parallel_logits_out(%z : memref<?x?xf32>) sum_logits_local_out(%sz : memref<?xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 64 : i64, softcap = 30.0 : f64, ignore_index = -100 : i64,
       tile_sizes = #train.tiles<bt = 32, v = 64>}
  func.return
}

// CHECK-LABEL: func.func @loss_with_max_sum
func.func @loss_with_max_sum(%m: memref<8xf32>, %s: memref<8xf32>, %p: memref<8xf32>, %l: memref<8xf32>) {
  // CHECK: train.fused_cross_entropy_loss_with_max_sum logits_max(%{{.*}} : memref<8xf32>) sum_exp_logits(%{{.*}} : memref<8xf32>) predicted_logits(%{{.*}} : memref<8xf32>) -> loss_out(%{{.*}} : memref<8xf32>)
  // CHECK-NOT: softmax_out
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<8xf32>) sum_exp_logits(%s : memref<8xf32>)
      predicted_logits(%p : memref<8xf32>) -> loss_out(%l : memref<8xf32>)
  func.return
}

// CHECK-LABEL: func.func @loss_with_max_sum_every_option
func.func @loss_with_max_sum_every_option(%m: memref<?xf32>, %s: memref<?xf32>, %p: memref<?xf32>,
    %z: memref<?x?xbf16>, %sz: memref<?xf32>, %t: memref<?xi64>, %l: memref<?xf32>, %sm: memref<?x?xf32>) {
  // CHECK: predicted_logits(%{{.*}} : memref<?xf32>) vocab_parallel_logits(%{{.*}} : memref<?x?xbf16>) sum_logits(%{{.*}} : memref<?xf32>) target(%{{.*}} : memref<?xi64>) -> loss_out(%{{.*}} : memref<?xf32>) softmax_out(%{{.*}} : memref<?x?xf32>) {label_smoothing = 1.000000e-01 : f64, vocab_size = 1000 : i64, z_loss = 1.000000e-04 : f64, ignore_index = -100 : i64}
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<?xf32>) sum_exp_logits(%s : memref<?xf32>)
      predicted_logits(%p : memref<?xf32>) vocab_parallel_logits(%z : memref<?x?xbf16>)
      sum_logits(%sz : memref<?xf32>) target(%t : memref<?xi64>)
      -> loss_out(%l : memref<?xf32>) softmax_out(%sm : memref<?x?xf32>)
      {label_smoothing = 0.1 : f64, vocab_size = 1000 : i64, z_loss = 1.0e-04 : f64, ignore_index = -100 : i64}
  func.return
}

// The gradient's extensions (FORWARD.md §4) print as properties, off (absent) by default.
// CHECK-LABEL: func.func @flce_extensions
func.func @flce_extensions(%g: memref<8xf32>, %x: memref<8x16xf32>, %w: memref<256x16xf32>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %gx: memref<8x16xf32>, %gw: memref<256x16xf32>) {
  // CHECK: weight_grad_out(%{{.*}} : memref<256x16xf32>) {label_smoothing = 1.000000e-01 : f64, vocab_size = 1000 : i64, z_loss = 1.000000e-04 : f64, softcap = 3.000000e+01 : f64}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xf32>)
      weight(%w : memref<256x16xf32>) target_mask(%mask : memref<1xui8>) masked_target(%t : memref<8xi64>)
      logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      -> input_grad_out(%gx : memref<8x16xf32>) weight_grad_out(%gw : memref<256x16xf32>)
      {label_smoothing = 0.1 : f64, vocab_size = 1000 : i64, z_loss = 1.0e-04 : f64, softcap = 30.0 : f64}
  func.return
}

// The extension logits_block (compact kept logits): the forward writes E = exp(Z' − C) in float16
// and C, each block of 48 columns' row maximum, (BT, ceil(300/48)) = (100, 7); the default, 0,
// is not printed.
// CHECK-LABEL: func.func @online_max_sum_compact_logits
func.func @online_max_sum_compact_logits(%x: memref<100x48xbf16>, %w: memref<300x48xbf16>, %t: memref<100xi64>,
                                         %m: memref<100xf32>, %s: memref<100xf32>, %p: memref<100xf32>,
                                         %mask: memref<13xui8>, %mt: memref<100xi64>, %z: memref<100x300xf16>,
                                         %c: memref<100x7xf32>) {
  // CHECK: vocab_parallel_logits_out(%{{.*}} : memref<100x300xf16>) logits_block_max_out(%{{.*}} : memref<100x7xf32>) {vocab_start_index = 1000 : i64, vocab_end_index = 1300 : i64, logits_block = 48 : i64}
  train.fused_linear_online_max_sum input(%x : memref<100x48xbf16>) weight(%w : memref<300x48xbf16>)
      target(%t : memref<100xi64>) -> logits_max_local_out(%m : memref<100xf32>)
      sum_exp_logits_local_out(%s : memref<100xf32>) predicted_logits_local_out(%p : memref<100xf32>)
      target_mask_out(%mask : memref<13xui8>) masked_target_out(%mt : memref<100xi64>)
      vocab_parallel_logits_out(%z : memref<100x300xf16>) logits_block_max_out(%c : memref<100x7xf32>)
      {vocab_start_index = 1000 : i64, vocab_end_index = 1300 : i64, logits_block = 48 : i64}
  func.return
}

// ... and the gradient reads them: softmax (float16 E) then softmax_block_max (C).
// CHECK-LABEL: func.func @flce_compact_logits
func.func @flce_compact_logits(%g: memref<8xf32>, %x: memref<8x16xbf16>, %w: memref<256x16xbf16>,
    %mask: memref<1xui8>, %t: memref<8xi64>, %lm: memref<8xf32>, %se: memref<8xf32>,
    %z: memref<8x256xf16>, %c: memref<8x6xf32>, %gx: memref<8x16xbf16>, %gw: memref<256x16xbf16>) {
  // CHECK: logits_max(%{{.*}} : memref<8xf32>) sum_exp_logits(%{{.*}} : memref<8xf32>) softmax(%{{.*}} : memref<8x256xf16>) softmax_block_max(%{{.*}} : memref<8x6xf32>) -> input_grad_out(%{{.*}} : memref<8x16xbf16>) weight_grad_out(%{{.*}} : memref<256x16xbf16>) {softmax_is_logits = true, logits_block = 48 : i64}
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x16xbf16>)
      weight(%w : memref<256x16xbf16>) target_mask(%mask : memref<1xui8>) masked_target(%t : memref<8xi64>)
      logits_max(%lm : memref<8xf32>) sum_exp_logits(%se : memref<8xf32>)
      softmax(%z : memref<8x256xf16>) softmax_block_max(%c : memref<8x6xf32>)
      -> input_grad_out(%gx : memref<8x16xbf16>) weight_grad_out(%gw : memref<256x16xbf16>)
      {softmax_is_logits = true, logits_block = 48 : i64}
  func.return
}
