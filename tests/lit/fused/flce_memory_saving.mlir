// fuse-linear-cross-entropy-grad: one loop nest over vocabulary tiles and token tiles holding
// the three contractions and the exponential; no buffer whose size depends on V; the tile
// sizes come from the op's `tile_sizes`, or from the pass options when it has none, or, left at
// 0, from the cpu's caches: a float32 logits tile of a quarter of the L2 (512 KiB here), about
// square, v a multiple of the micro-kernel's 16 columns and bt of its 6 rows: 186 x 176.
// RUN: npugrad-opt %s --stage fused --cpu %inputs/avx2.toml | FileCheck %s --check-prefixes=CHECK,STAGE
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{cpu="%inputs/avx2.toml"}' | FileCheck %s --check-prefixes=CHECK,PASS
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{tile_bt=16 tile_v=256}' | FileCheck %s --check-prefix=OPTS
// RUN: npugrad-opt %s --stage run --entry hand_set_tiles | FileCheck %s --check-prefix=EXEC

// CHECK-LABEL: func.func @hand_set_tiles
// The function says which op the nest computes (properties, operands' argument positions), so
// that this stage read back in is still run against the op's reference (--stage run).
// CHECK-SAME:    attributes {train.source = #train.source<"train.fused_linear_cross_entropy_loss_grad", {{.*}}, {grad = 0 : i64, input = 1 : i64, {{.*}}, weight_grad_out = 8 : i64}>}
// CHECK-NOT:     train.fused_linear_cross_entropy_loss_grad grad(
// The only allocations: the 32x128 logit tile, the 32 saved target logits and the W tile
// packed transposed (48x128); float32 outputs accumulate in place.
// PASS-DAG:      %[[BT_TILE:.*]] = arith.constant 32 : index
// CHECK-DAG:     %[[V_TILE:.*]] = arith.constant 128 : index
// CHECK:         %[[Z:.*]] = memref.alloc() {{.*}} : memref<32x128xf32>
// CHECK-NEXT:    %[[SAVED:.*]] = memref.alloc() {{.*}} : memref<32xf32>
// CHECK-NEXT:    %[[PACKED:.*]] = memref.alloc() {{.*}} : memref<48x128xf32>
// CHECK-NOT:     memref.alloc
// CHECK:         scf.for %[[V0:.*]] = %{{.*}} to %{{.*}} step %[[V_TILE]] {
// CHECK:           memref.subview %{{.*}}[%[[V0]], 0] [%{{.*}}, 48] [1, 1] : memref<520x48xf32>
// CHECK:           memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] : memref<48x?xf32, strided<[128, 1]>>
// The pass alone steps by the tile; the pipeline spreads the tokens evenly over the cpu's cores
// (linear_nests.balanced_starts): a loop over tile indices, each tile at most the tile's rows.
// PASS:            scf.for %[[T0:.*]] = %{{.*}} to %{{.*}} step %[[BT_TILE]] {
// STAGE:           scf.for %token_tile = %{{.*}} to %token_tiles step %{{.*}} {
// STAGE-NEXT:        arith.muli %token_tile, %token_units : index
// CHECK:             linalg.generic {{.*}} doc = "GEMM 1: logits tile Z = X_t * W_v^T"
// CHECK:             math.exp
// CHECK:             linalg.generic {{.*}} doc = "GEMM 2: input grad tile dX_t += G * W_v"
// CHECK:             linalg.generic {{.*}} doc = "GEMM 3: weight grad tile dW_v += G^T * X_t"
// CHECK:           }
// CHECK:         } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 32, v = 128>>}
// CHECK-NOT:     memref.alloc
// CHECK:         memref.dealloc %[[Z]]
// CHECK:         memref.dealloc %[[SAVED]]
// CHECK:         memref.dealloc %[[PACKED]]

// CHECK-LABEL: func.func @pass_option_tiles
// CHECK:         memref.alloc() {{.*}} : memref<186x176xf32>
// CHECK:         } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 186, v = 176>>}

// OPTS-LABEL: func.func @hand_set_tiles
// OPTS:         } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 32, v = 128>>}
// OPTS-LABEL: func.func @pass_option_tiles
// OPTS:         memref.alloc() {{.*}} : memref<16x256xf32>
// OPTS:         } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 16, v = 256>>}

// EXEC-LABEL: @hand_set_tiles
// EXEC-NEXT:   operand
// EXEC-NEXT:   input_grad_out {{.*}} ok
// EXEC-NEXT:   weight_grad_out {{.*}} ok

func.func @hand_set_tiles(%g: memref<100xf32>, %x: memref<100x48xf32>, %w: memref<520x48xf32>, %mask: memref<100xi1>,
                          %t: memref<100xi32>, %lm: memref<100xf32>, %se: memref<100xf32>,
                          %gx: memref<100x48xf32>, %gw: memref<520x48xf32>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<100xf32>) input(%x : memref<100x48xf32>)
      weight(%w : memref<520x48xf32>) target_mask(%mask : memref<100xi1>) masked_target(%t : memref<100xi32>)
      logits_max(%lm : memref<100xf32>) sum_exp_logits(%se : memref<100xf32>)
      -> input_grad_out(%gx : memref<100x48xf32>) weight_grad_out(%gw : memref<520x48xf32>)
      {tile_sizes = #train.tiles<bt = 32, v = 128>}
  func.return
}

func.func @pass_option_tiles(%g: memref<?xf32>, %x: memref<?x?xf32>, %w: memref<?x?xf32>, %mask: memref<?xi1>,
                             %t: memref<?xi64>, %lm: memref<?xf32>, %se: memref<?xf32>,
                             %gx: memref<?x?xf32>, %gw: memref<?x?xf32>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<?xf32>) input(%x : memref<?x?xf32>)
      weight(%w : memref<?x?xf32>) target_mask(%mask : memref<?xi1>) masked_target(%t : memref<?xi64>)
      logits_max(%lm : memref<?xf32>) sum_exp_logits(%se : memref<?xf32>)
      -> input_grad_out(%gx : memref<?x?xf32>) weight_grad_out(%gw : memref<?x?xf32>)
  func.return
}
