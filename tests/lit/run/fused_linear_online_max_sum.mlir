// --stage run of the forward statistics on random valid operands (targets spread over and
// outside the shard), fused (default), unfused, and tiled for both shipped targets, checked
// against the NumPy reference: statistics in float32, the mask and masked targets exactly.
// RUN: npugrad-opt %examples/flce_forward.mlir --stage run --seed 3 | FileCheck %s
// RUN: npugrad-opt %examples/flce_forward.mlir --stage run --no-fuse | FileCheck %s
// RUN: npugrad-opt %examples/flce_forward.mlir --stage run --target npu-a2 | FileCheck %s
// RUN: npugrad-opt %examples/flce_forward.mlir --stage run --target host | FileCheck %s
// RUN: npugrad-opt %s --stage run --entry every_option | FileCheck %s --check-prefix=ALL
// RUN: npugrad-opt %s --stage run --entry every_option --target npu-a2 | FileCheck %s --check-prefix=ALL
// RUN: npugrad-opt %s --stage run --entry float32_logits | FileCheck %s --check-prefix=WIDE
// RUN: npugrad-opt %s --stage run --entry float32_logits --target npu-a2 | FileCheck %s --check-prefix=WIDE
// RUN: npugrad-opt %s --stage run --entry compact_logits | FileCheck %s --check-prefix=COMPACT
// RUN: npugrad-opt %s --stage run --entry compact_logits --no-fuse | FileCheck %s --check-prefix=COMPACT
// RUN: npugrad-opt %s --stage run --entry compact_logits --target npu-a2 | FileCheck %s --check-prefix=COMPACT
// RUN: npugrad-opt %s --stage run --entry run_time_range | FileCheck %s --check-prefix=RANGE
// RUN: npugrad-opt %s --stage run --entry run_time_range --no-fuse | FileCheck %s --check-prefix=RANGE
// RUN: npugrad-opt %s --stage run --entry run_time_range --target npu-a2 | FileCheck %s --check-prefix=RANGE

// CHECK: @flce_forward: compiled in {{.*}} ms, ran in {{.*}} ms
// CHECK: logits_max_local_out {{ *}}(100,) {{ *}}float32 {{.*}} ok
// CHECK: sum_exp_logits_local_out {{ *}}(100,) {{ *}}float32 {{.*}} ok
// CHECK: predicted_logits_local_out (100,) {{ *}}float32 {{.*}} ok
// CHECK: target_mask_out {{ *}}(13,) {{ *}}uint8 {{ *}}0.00e+00 {{.*}} ok
// CHECK: masked_target_out {{ *}}(100,) {{ *}}int64 {{ *}}0.00e+00 {{.*}} ok

// Sizes no tile divides, the logits and Σz asked for, the softcap and ignored rows.
// ALL: @every_option
// ALL: logits_max_local_out {{.*}} ok
// ALL: sum_exp_logits_local_out {{.*}} ok
// ALL: predicted_logits_local_out {{.*}} ok
// ALL: target_mask_out {{.*}} ok
// ALL: masked_target_out {{.*}} ok
// ALL: vocab_parallel_logits_out (37, 203) {{ *}}float16 {{.*}} ok
// ALL: sum_logits_local_out {{.*}} ok
func.func @every_option(%x: memref<37x19xf16>, %w: memref<203x19xf16>, %t: memref<37xi32>,
                        %m: memref<37xf32>, %s: memref<37xf32>, %p: memref<37xf32>,
                        %mask: memref<5xui8>, %mt: memref<37xi32>, %z: memref<37x203xf16>,
                        %sz: memref<37xf32>) {
  train.fused_linear_online_max_sum input(%x : memref<37x19xf16>) weight(%w : memref<203x19xf16>)
      target(%t : memref<37xi32>) -> logits_max_local_out(%m : memref<37xf32>)
      sum_exp_logits_local_out(%s : memref<37xf32>) predicted_logits_local_out(%p : memref<37xf32>)
      target_mask_out(%mask : memref<5xui8>) masked_target_out(%mt : memref<37xi32>)
      vocab_parallel_logits_out(%z : memref<37x203xf16>) sum_logits_local_out(%sz : memref<37xf32>)
      {vocab_start_index = 400 : i64, vocab_end_index = 603 : i64, softcap = 2.0 : f64, ignore_index = -100 : i64}
  func.return
}

// The extension float32_logits: a bfloat16 input's logits written in float32, unrounded (checked
// against the reference's float32 logits at float32's tolerance).
// WIDE: @float32_logits
// WIDE: logits_max_local_out {{.*}} ok
// WIDE: vocab_parallel_logits_out (37, 203) {{ *}}float32 {{.*}} 1.0e-05 {{ *}}ok
func.func @float32_logits(%x: memref<37x40xbf16>, %w: memref<203x40xbf16>, %t: memref<37xi64>,
                          %m: memref<37xf32>, %s: memref<37xf32>, %p: memref<37xf32>,
                          %mask: memref<5xui8>, %mt: memref<37xi64>, %z: memref<37x203xf32>) {
  train.fused_linear_online_max_sum input(%x : memref<37x40xbf16>) weight(%w : memref<203x40xbf16>)
      target(%t : memref<37xi64>) -> logits_max_local_out(%m : memref<37xf32>)
      sum_exp_logits_local_out(%s : memref<37xf32>) predicted_logits_local_out(%p : memref<37xf32>)
      target_mask_out(%mask : memref<5xui8>) masked_target_out(%mt : memref<37xi64>)
      vocab_parallel_logits_out(%z : memref<37x203xf32>)
      {vocab_start_index = 100 : i64, vocab_end_index = 303 : i64, float32_logits = true}
  func.return
}

// The extension logits_block: compact logits in blocks of B = 32 columns, V = 203 so that the
// last block is partial (11 columns): E = exp(Z' − C) in float16 and C (BT, ceil(203/32)) =
// (37, 7) the blocks' row maxima, with the softcap and ignored rows (their E and C are 0);
// fused, unfused and tiled for npu-a2, checked against the reference's compact logits.
// COMPACT: @compact_logits
// COMPACT: logits_max_local_out {{.*}} ok
// COMPACT: sum_exp_logits_local_out {{.*}} ok
// COMPACT: predicted_logits_local_out {{.*}} ok
// COMPACT: target_mask_out {{.*}} ok
// COMPACT: masked_target_out {{.*}} ok
// COMPACT: vocab_parallel_logits_out (37, 203) {{ *}}float16 {{.*}} ok
// COMPACT: logits_block_max_out {{ *}}(37, 7) {{ *}}float32 {{.*}} ok
func.func @compact_logits(%x: memref<37x40xbf16>, %w: memref<203x40xbf16>, %t: memref<37xi64>,
                          %m: memref<37xf32>, %s: memref<37xf32>, %p: memref<37xf32>,
                          %mask: memref<5xui8>, %mt: memref<37xi64>, %z: memref<37x203xf16>,
                          %c: memref<37x7xf32>) {
  train.fused_linear_online_max_sum input(%x : memref<37x40xbf16>) weight(%w : memref<203x40xbf16>)
      target(%t : memref<37xi64>) -> logits_max_local_out(%m : memref<37xf32>)
      sum_exp_logits_local_out(%s : memref<37xf32>) predicted_logits_local_out(%p : memref<37xf32>)
      target_mask_out(%mask : memref<5xui8>) masked_target_out(%mt : memref<37xi64>)
      vocab_parallel_logits_out(%z : memref<37x203xf16>) logits_block_max_out(%c : memref<37x7xf32>)
      {vocab_start_index = 100 : i64, vocab_end_index = 303 : i64, logits_block = 32 : i64, softcap = 2.0 : f64,
       ignore_index = -100 : i64}
  func.return
}

// The shard given at run time (the extension vocab_range, int64 [start, end]; the runner's random
// operands make it [V, 2V) and spread the targets over and around it), int32 targets and ignored
// rows: fused, unfused and tiled for npu-a2.
// RANGE: @run_time_range
// RANGE: logits_max_local_out {{.*}} ok
// RANGE: sum_exp_logits_local_out {{.*}} ok
// RANGE: predicted_logits_local_out {{.*}} ok
// RANGE: target_mask_out {{ *}}(5,) {{ *}}uint8 {{ *}}0.00e+00 {{.*}} ok
// RANGE: masked_target_out {{ *}}(37,) {{ *}}int32 {{ *}}0.00e+00 {{.*}} ok
func.func @run_time_range(%x: memref<37x40xbf16>, %w: memref<203x40xbf16>, %t: memref<37xi32>, %r: memref<2xi64>,
                          %m: memref<37xf32>, %s: memref<37xf32>, %p: memref<37xf32>,
                          %mask: memref<5xui8>, %mt: memref<37xi32>) {
  train.fused_linear_online_max_sum input(%x : memref<37x40xbf16>) weight(%w : memref<203x40xbf16>)
      target(%t : memref<37xi32>) vocab_range(%r : memref<2xi64>) -> logits_max_local_out(%m : memref<37xf32>)
      sum_exp_logits_local_out(%s : memref<37xf32>) predicted_logits_local_out(%p : memref<37xf32>)
      target_mask_out(%mask : memref<5xui8>) masked_target_out(%mt : memref<37xi32>)
      {ignore_index = -100 : i64}
  func.return
}
