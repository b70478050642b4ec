// A nest spread over blocks by one of tile-for-target and distribute-over-cores is left alone by
// the other: the `tiled` stage for npu-a2 run without a target (whose pipeline runs
// distribute-over-cores), and a distributed nest given to tile-for-target. Each read the other's
// wavefront as the fuse pass's nest: an internal error (StopIteration, AssertionError).
// RUN: npugrad-opt %s --target npu-a2 --stage tiled | npugrad-opt --stage run | FileCheck %s
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{tile_bt=5 tile_v=9},tile-for-target{target=npu-a2}' --stage run | FileCheck %s
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{tile_bt=5 tile_v=9},distribute-over-cores' --target npu-a2 --stage run | FileCheck %s
// CHECK: input_grad_out {{.*}} ok
// CHECK: weight_grad_out {{.*}} ok
func.func @flce_grad(%grad: memref<16xf32>, %x: memref<16x32xbf16>, %w: memref<37x32xbf16>,
                     %mask: memref<2xui8>, %target: memref<16xi64>,
                     %max: memref<16xf32>, %sum: memref<16xf32>,
                     %dx: memref<16x32xbf16>, %dw: memref<37x32xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%grad : memref<16xf32>) input(%x : memref<16x32xbf16>)
      weight(%w : memref<37x32xbf16>) target_mask(%mask : memref<2xui8>) masked_target(%target : memref<16xi64>)
      logits_max(%max : memref<16xf32>) sum_exp_logits(%sum : memref<16xf32>)
      -> input_grad_out(%dx : memref<16x32xbf16>) weight_grad_out(%dw : memref<37x32xbf16>)
  func.return
}
