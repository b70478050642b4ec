// The fused nest with balance_blocks=0 (the pass's default: its token loop over rows in steps of
// tile_bt) split into groups of token tiles by distribute-over-cores: 42 tiles of 100 rows, groups
// of ceil(2048/100) = 21 tiles. Each group once: a group stepped in tiles over rows recomputed rows.
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{tile_bt=100 tile_v=32},distribute-over-cores' | npugrad-opt --stage run | FileCheck %s
// Tiles past the static dimensions are the dimensions (linear_nests.within): tile_bt=10^9 made a
// logits tile of 10^9 rows (a kernel whose malloc failed) for the same rows and columns.
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{tile_bt=1000000000 tile_v=1000000}' | FileCheck %s --check-prefix=CLAMP
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{tile_bt=1000000000 tile_v=1000000}' | npugrad-opt --stage run | FileCheck %s
// CLAMP: %logits = memref.alloc() {{.*}} : memref<4200x64xf32>
// CHECK: input_grad_out {{.*}} ok
// CHECK: weight_grad_out {{.*}} ok
func.func @flce_grad(%grad: memref<4200xf32>, %x: memref<4200x16xbf16>, %w: memref<64x16xbf16>,
                     %mask: memref<525xui8>, %target: memref<4200xi64>,
                     %max: memref<4200xf32>, %sum: memref<4200xf32>,
                     %dx: memref<4200x16xbf16>, %dw: memref<64x16xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%grad : memref<4200xf32>) input(%x : memref<4200x16xbf16>)
      weight(%w : memref<64x16xbf16>) target_mask(%mask : memref<525xui8>) masked_target(%target : memref<4200xi64>)
      logits_max(%max : memref<4200xf32>) sum_exp_logits(%sum : memref<4200xf32>)
      -> input_grad_out(%dx : memref<4200x16xbf16>) weight_grad_out(%dw : memref<64x16xbf16>)
  func.return
}
