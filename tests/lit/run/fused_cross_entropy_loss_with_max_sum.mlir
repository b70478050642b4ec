// --stage run of the loss from the global statistics, checked against the NumPy reference:
// the plain loss, and every extension at once with a shard's softmax (sizes no tile divides).
// RUN: npugrad-opt %s --stage run --entry plain | FileCheck %s --check-prefix=PLAIN
// RUN: npugrad-opt %s --stage run --entry every_option | FileCheck %s --check-prefix=ALL
// RUN: npugrad-opt %s --stage run --entry every_option --target npu-a2 | FileCheck %s --check-prefix=ALL

// PLAIN: @plain
// PLAIN: loss_out {{ *}}(1000,) {{ *}}float32 {{.*}} ok
func.func @plain(%m: memref<1000xf32>, %s: memref<1000xf32>, %p: memref<1000xf32>, %l: memref<1000xf32>) {
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<1000xf32>) sum_exp_logits(%s : memref<1000xf32>)
      predicted_logits(%p : memref<1000xf32>) -> loss_out(%l : memref<1000xf32>)
  func.return
}

// ALL: @every_option
// ALL: loss_out {{ *}}(37,) {{ *}}float32 {{.*}} ok
// ALL: softmax_out {{ *}}(37, 300) {{ *}}float32 {{.*}} ok
func.func @every_option(%m: memref<37xf32>, %s: memref<37xf32>, %p: memref<37xf32>, %z: memref<37x300xbf16>,
                        %sz: memref<37xf32>, %t: memref<37xi64>, %l: memref<37xf32>, %sm: memref<37x300xf32>) {
  train.fused_cross_entropy_loss_with_max_sum logits_max(%m : memref<37xf32>) sum_exp_logits(%s : memref<37xf32>)
      predicted_logits(%p : memref<37xf32>) vocab_parallel_logits(%z : memref<37x300xbf16>)
      sum_logits(%sz : memref<37xf32>) target(%t : memref<37xi64>)
      -> loss_out(%l : memref<37xf32>) softmax_out(%sm : memref<37x300xf32>)
      {label_smoothing = 0.1 : f64, vocab_size = 1000 : i64, z_loss = 1.0e-04 : f64, ignore_index = -100 : i64}
  func.return
}
