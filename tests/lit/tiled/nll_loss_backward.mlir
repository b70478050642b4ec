// tile-for-target on nll_loss_backward: tiles of out (rows x c) dealt round-robin to the blocks
// (scf.for %tile = %bid to %ntiles step %nblk), each zeroed in a local buffer of the vector level
// (npu-a2: the UB, double-buffered; host: L2), its targets, upstream gradients (reduction none)
// and weights copied in, the guarded stores made there, the tile copied out.
// RUN: npugrad-opt %s --target npu-a2 --stage tiled | FileCheck %s --check-prefix=NPU
// RUN: npugrad-opt %s --target host --stage tiled | FileCheck %s --check-prefix=HOST
// RUN: npugrad-opt %s --target npu-a2 --stage run --entry none_ui8_f16 --seed 1 | FileCheck %s --check-prefix=RUN-NONE
// RUN: npugrad-opt %s --target host --stage run --entry none_ui8_f16 --seed 2 | FileCheck %s --check-prefix=RUN-NONE
// RUN: npugrad-opt %s --target npu-a2 --stage run --entry one_d_bf16 --seed 3 | FileCheck %s --check-prefix=RUN-ONED
// RUN: npugrad-opt %s --target host --stage run --entry one_d_bf16 --seed 4 | FileCheck %s --check-prefix=RUN-ONED
// RUN: npugrad-opt %s --target npu-a2 --stage run --entry hand_set --seed 5 | FileCheck %s --check-prefix=RUN-HAND
// RUN: npugrad-opt %s --target host --stage run --entry hand_set --seed 6 | FileCheck %s --check-prefix=RUN-HAND

// Dynamic shapes, mean: c = 4096 columns (of at most a quarter of the level), rows filling the
// rest. npu-a2: 2 x (4·4096·4 + 32 + 4096·4) B ≈ 160 KiB of the 192 KiB UB (a fifth row would
// not fit). The scale -grad_output/total_weight is computed once, before the tile loop.
// NPU-LABEL: func.func @mean_dynamic
// NPU:         %[[BID:.*]] = npu.block_idx
// NPU-NEXT:    %[[NBLK:.*]] = npu.block_dim
// NPU-NEXT:    %[[OUT_L:.*]] = npu.alloc_local {double_buffer} : memref<4x4096xf32, #npu.mem<ub>>
// NPU-NEXT:    %[[T_L:.*]] = npu.alloc_local {double_buffer} : memref<4xi64, #npu.mem<ub>>
// NPU-NEXT:    %[[W_L:.*]] = npu.alloc_local {double_buffer} : memref<4096xf32, #npu.mem<ub>>
// NPU:         %[[S:.*]] = arith.negf
// NPU:         scf.for %[[TILE:.*]] = %[[BID]] to %{{.*}} step %[[NBLK]] {
// NPU:           %[[OUT_T:.*]] = memref.subview %[[OUT_L]][0, 0] [%[[RN:.*]], %[[CN:.*]]] [1, 1]
// NPU:             memref.store %{{.*}}, %[[OUT_T]][
// NPU:           %[[T_G:.*]] = memref.subview %t[%{{.*}}] [%[[RN]]] [1] : memref<?xi64>
// NPU-NEXT:      %[[T_T:.*]] = memref.subview %[[T_L]][0] [%[[RN]]] [1]
// NPU-NEXT:      npu.copy %[[T_G]], %[[T_T]] : memref<?xi64, strided<[1], offset: ?>>, memref<?xi64, strided<[1]>, #npu.mem<ub>>
// NPU-NEXT:      %[[W_G:.*]] = memref.subview %w[%{{.*}}] [%[[CN]]] [1] : memref<?xf32>
// NPU-NEXT:      %[[W_T:.*]] = memref.subview %[[W_L]][0] [%[[CN]]] [1]
// NPU-NEXT:      npu.copy %[[W_G]], %[[W_T]] : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<ub>>
// NPU:           scf.for
// NPU:             memref.load %[[T_L]][
// NPU:             arith.cmpi ult
// NPU:             scf.if
// NPU-NEXT:          memref.load %[[W_L]][
// NPU-NEXT:          arith.mulf %{{.*}}, %[[S]] : f32
// NPU-NEXT:          memref.store %{{.*}}, %[[OUT_L]][
// NPU:           %[[OUT_G:.*]] = memref.subview %o[%{{.*}}, %{{.*}}] [%[[RN]], %[[CN]]] [1, 1] : memref<?x?xf32>
// NPU-NEXT:      npu.copy %[[OUT_T]], %[[OUT_G]] : memref<?x?xf32, strided<[4096, 1]>, #npu.mem<ub>>, memref<?x?xf32, strided<[?, 1], offset: ?>>
// NPU-NEXT:    } {train.tiles = #train.tiles<rows = 4, c = 4096>}
// NPU-NOT:     npu.alloc_local
// NPU:         func.return

// host: the tiles live in L2, once (no double buffering); rows depend on this machine's L2.
// HOST-LABEL: func.func @mean_dynamic
// HOST:         %[[BID:.*]] = npu.block_idx
// HOST-NEXT:    %[[NBLK:.*]] = npu.block_dim
// HOST-NEXT:    npu.alloc_local : memref<[[ROWS:[0-9]+]]x4096xf32, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<[[ROWS]]xi64, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<4096xf32, #npu.mem<l2>>
// HOST:         scf.for %{{.*}} = %[[BID]] to %{{.*}} step %[[NBLK]] {
// HOST:           npu.copy {{.*}} : memref<?xi64, strided<[1], offset: ?>>, memref<?xi64, strided<[1]>, #npu.mem<l2>>
// HOST:           npu.copy {{.*}} : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<l2>>
// HOST:           npu.copy {{.*}} : memref<?x?xf32, strided<[4096, 1]>, #npu.mem<l2>>, memref<?x?xf32, strided<[?, 1], offset: ?>>
// HOST-NEXT:    } {train.tiles = #train.tiles<rows = [[ROWS]], c = 4096>}
func.func @mean_dynamic(%g: memref<f32>, %s: memref<?x?xf32>, %t: memref<?xi64>, %w: memref<?xf32>,
                        %tw: memref<1xf32>, %o: memref<?x?xf32>) {
  train.nll_loss_backward grad_output(%g : memref<f32>) self(%s : memref<?x?xf32>) target(%t : memref<?xi64>)
      weight(%w : memref<?xf32>) total_weight(%tw : memref<1xf32>) -> out(%o : memref<?x?xf32>)
  func.return
}

// Reduction none: each tile also brings in its rows' grad_output. One tile of the whole (33 x 17)
// output, set by hand (with static shapes choose-tile-sizes would spread rows over the cores).
// NPU-LABEL: func.func @none_ui8_f16
// NPU:         npu.alloc_local {double_buffer} : memref<33x17xf16, #npu.mem<ub>>
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<33xui8, #npu.mem<ub>>
// NPU-NEXT:    %[[G_L:.*]] = npu.alloc_local {double_buffer} : memref<33xf16, #npu.mem<ub>>
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<17xf16, #npu.mem<ub>>
// NPU:         scf.for
// NPU:           npu.copy %{{.*}}, %{{.*}} : memref<?xui8, strided<[1], offset: ?>>, memref<?xui8, strided<[1]>, #npu.mem<ub>>
// NPU:           %[[G_G:.*]] = memref.subview %g[
// NPU-NEXT:      %[[G_T:.*]] = memref.subview %[[G_L]][0]
// NPU-NEXT:      npu.copy %[[G_G]], %[[G_T]] : memref<?xf16, strided<[1], offset: ?>>, memref<?xf16, strided<[1]>, #npu.mem<ub>>
// NPU:           scf.if
// NPU-NEXT:        memref.load %[[G_L]][
// NPU:         } {train.tiles = #train.tiles<rows = 33, c = 17>}
// HOST-LABEL: func.func @none_ui8_f16
// HOST:         npu.alloc_local : memref<33x17xf16, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<33xui8, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<33xf16, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<17xf16, #npu.mem<l2>>
// HOST:         } {train.tiles = #train.tiles<rows = 33, c = 17>}
// RUN-NONE: @none_ui8_f16
// RUN-NONE: out {{ *}}(33, 17) {{ *}}float16 {{.*}} ok
func.func @none_ui8_f16(%g: memref<33xf16>, %s: memref<33x17xf16>, %t: memref<33xui8>, %w: memref<17xf16>,
                        %tw: memref<1xf16>, %o: memref<33x17xf16>) {
  train.nll_loss_backward grad_output(%g : memref<33xf16>) self(%s : memref<33x17xf16>) target(%t : memref<33xui8>)
      weight(%w : memref<17xf16>) total_weight(%tw : memref<1xf16>) -> out(%o : memref<33x17xf16>)
      {reduction = 0 : i64, ignore_index = 2 : i64, tile_sizes = #train.tiles<rows = 33, c = 17>}
  func.return
}

// 1-D self: tiles of c columns only; the one target is a 0-D tile.
// NPU-LABEL: func.func @one_d_bf16
// NPU:         npu.alloc_local {double_buffer} : memref<13xbf16, #npu.mem<ub>>
// NPU-NEXT:    %[[T_L:.*]] = npu.alloc_local {double_buffer} : memref<i64, #npu.mem<ub>>
// NPU:           npu.copy %t, %[[T_L]] : memref<i64>, memref<i64, #npu.mem<ub>>
// NPU:         } {train.tiles = #train.tiles<c = 13>}
// HOST-LABEL: func.func @one_d_bf16
// HOST:         %[[T_L:.*]] = npu.alloc_local : memref<i64, #npu.mem<l2>>
// HOST:           npu.copy %t, %[[T_L]] : memref<i64>, memref<i64, #npu.mem<l2>>
// HOST:         } {train.tiles = #train.tiles<c = 13>}
// RUN-ONED: @one_d_bf16
// RUN-ONED: out {{ *}}(13,) {{ *}}bfloat16 {{.*}} ok
func.func @one_d_bf16(%g: memref<bf16>, %s: memref<13xbf16>, %t: memref<i64>, %w: memref<13xbf16>,
                      %tw: memref<bf16>, %o: memref<13xbf16>) {
  train.nll_loss_backward grad_output(%g : memref<bf16>) self(%s : memref<13xbf16>) target(%t : memref<i64>)
      weight(%w : memref<13xbf16>) total_weight(%tw : memref<bf16>) -> out(%o : memref<13xbf16>)
      {reduction = 2 : i64}
  func.return
}

// Hand-set tile sizes are kept on every target: 8 row tiles x 7 column tiles (the last 4 wide).
// NPU-LABEL: func.func @hand_set
// NPU:         npu.alloc_local {double_buffer} : memref<8x16xf32, #npu.mem<ub>>
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<8xi32, #npu.mem<ub>>
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<16xf32, #npu.mem<ub>>
// NPU:         } {train.tiles = #train.tiles<rows = 8, c = 16>}
// HOST-LABEL: func.func @hand_set
// HOST:         npu.alloc_local : memref<8x16xf32, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<8xi32, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<16xf32, #npu.mem<l2>>
// HOST:         } {train.tiles = #train.tiles<rows = 8, c = 16>}
// RUN-HAND: @hand_set
// RUN-HAND: out {{ *}}(64, 100) {{ *}}float32 {{.*}} ok
func.func @hand_set(%g: memref<1xf32>, %s: memref<64x100xf32>, %t: memref<64xi32>, %w: memref<100xf32>,
                    %tw: memref<1xf32>, %o: memref<64x100xf32>) {
  train.nll_loss_backward grad_output(%g : memref<1xf32>) self(%s : memref<64x100xf32>) target(%t : memref<64xi32>)
      weight(%w : memref<100xf32>) total_weight(%tw : memref<1xf32>) -> out(%o : memref<64x100xf32>)
      {reduction = 1 : i64, tile_sizes = #train.tiles<rows = 8, c = 16>}
  func.return
}
