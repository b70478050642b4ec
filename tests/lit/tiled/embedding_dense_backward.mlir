// tile-for-target on embedding_dense_backward: row tiles of out dealt round-robin to the blocks
// (scf.for %tile = %bid to %row_tiles step %nblk); each block sorts the indices of its own rows
// into buckets (scratch in global memory: %off, %perm), then per tile and d-chunk sums each row's
// bucket into a float32 accumulator tile of the vector level, copying each contributing grad row
// chunk in, and copies the rounded tile out. npu-a2: UB, copied tiles double-buffered; host: L2.
// RUN: npugrad-opt %s --target npu-a2 --stage tiled | FileCheck %s --check-prefix=NPU
// RUN: npugrad-opt %s --target host --stage tiled | FileCheck %s --check-prefix=HOST
// RUN: npugrad-opt %s --target npu-a2 --stage run --entry bf16_to_f32_3d --seed 1 | FileCheck %s --check-prefix=RUN-3D
// RUN: npugrad-opt %s --target host --stage run --entry bf16_to_f32_3d --seed 2 | FileCheck %s --check-prefix=RUN-3D
// RUN: npugrad-opt %s --target npu-a2 --stage run --entry hand_set --seed 3 | FileCheck %s --check-prefix=RUN-HAND
// RUN: npugrad-opt %s --target host --stage run --entry hand_set --seed 4 | FileCheck %s --check-prefix=RUN-HAND

// Dynamic D: chunks of d = 1024; a float32 accumulator (computed in place, not copied) and the
// float16 tile copied out: 23·1024·4 + 2 x 23·1024·2 + 2 x 1024·2 B = 188 KiB of the 192 KiB UB.
// NPU-LABEL: func.func @dynamic_f16
// NPU:         %[[BID:.*]] = npu.block_idx
// NPU-NEXT:    %[[NBLK:.*]] = npu.block_dim
// NPU-NEXT:    %[[ACC:.*]] = npu.alloc_local : memref<23x1024xf32, #npu.mem<ub>>
// NPU-NEXT:    %[[OUT_L:.*]] = npu.alloc_local {double_buffer} : memref<23x1024xf16, #npu.mem<ub>>
// NPU-NEXT:    %[[G_L:.*]] = npu.alloc_local {double_buffer} : memref<1x1024xf16, #npu.mem<ub>>
// The buckets of this block's rows only: rows whose tile t has t mod nblk = bid.
// NPU:         %off = memref.alloc(
// NPU:           arith.remui %{{.*}}, %[[NBLK]] : index
// NPU-NEXT:      arith.cmpi eq, %{{.*}}, %[[BID]] : index
// NPU:         %perm = memref.alloc(
// NPU:         scf.for %[[TILE:.*]] = %[[BID]] to %{{.*}} step %[[NBLK]] {
// NPU:           scf.for %[[J0:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// NPU:             memref.store %{{.*}}, %[[ACC]][
// NPU:             memref.load %off[
// NPU:               %[[P:.*]] = memref.load %perm[
// NPU-NEXT:          %[[G_G:.*]] = memref.subview %g[%[[P]], %[[J0]]] [1, %[[DN:.*]]] [1, 1]
// NPU-NEXT:          %[[G_T:.*]] = memref.subview %[[G_L]][0, 0] [1, %[[DN]]] [1, 1]
// NPU-NEXT:          npu.copy %[[G_G]], %[[G_T]] : memref<1x?xf16, strided<[?, 1], offset: ?>>, memref<1x?xf16, strided<[1024, 1]>, #npu.mem<ub>>
// NPU:                 memref.load %[[G_L]][
// NPU-NEXT:            arith.extf
// NPU-NEXT:            arith.divf
// NPU-NEXT:            memref.load %[[ACC]][
// NPU-NEXT:            arith.addf
// NPU-NEXT:            memref.store %{{.*}}, %[[ACC]][
// NPU:               arith.truncf %{{.*}} : f32 to f16
// NPU-NEXT:          memref.store %{{.*}}, %[[OUT_L]][
// NPU:           %[[OUT_T:.*]] = memref.subview %[[OUT_L]][0, 0]
// NPU-NEXT:      %[[OUT_G:.*]] = memref.subview %out[%{{.*}}, %[[J0]]]
// NPU-NEXT:      npu.copy %[[OUT_T]], %[[OUT_G]] : memref<?x?xf16, strided<[1024, 1]>, #npu.mem<ub>>, memref<?x?xf16, strided<[?, 1], offset: ?>>
// NPU:         } {train.tiles = #train.tiles<rows = 23, d = 1024>}
// NPU:         memref.dealloc %perm
// NPU-NEXT:    memref.dealloc %off
// HOST-LABEL: func.func @dynamic_f16
// HOST:         %[[BID:.*]] = npu.block_idx
// HOST-NEXT:    %[[NBLK:.*]] = npu.block_dim
// HOST-NEXT:    npu.alloc_local : memref<[[ROWS:[0-9]+]]x1024xf32, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<[[ROWS]]x1024xf16, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<1x1024xf16, #npu.mem<l2>>
// HOST:         scf.for %{{.*}} = %[[BID]] to %{{.*}} step %[[NBLK]] {
// HOST:               npu.copy {{.*}} : memref<1x?xf16, strided<[?, 1], offset: ?>>, memref<1x?xf16, strided<[1024, 1]>, #npu.mem<l2>>
// HOST:           npu.copy {{.*}} : memref<?x?xf16, strided<[1024, 1]>, #npu.mem<l2>>, memref<?x?xf16, strided<[?, 1], offset: ?>>
// HOST:         } {train.tiles = #train.tiles<rows = [[ROWS]], d = 1024>}
func.func @dynamic_f16(%g: memref<?x?xf16>, %k: memref<?xi32>, %out: memref<32000x?xf16>) {
  train.embedding_dense_backward grad(%g : memref<?x?xf16>) indices(%k : memref<?xi32>)
      -> out(%out : memref<32000x?xf16>) {num_weights = 32000 : i64, scale_grad_by_freq = true}
  func.return
}

// A float32 out is copied out of the accumulator itself, which is then double-buffered; grad's
// row chunk keeps grad's rank (3-D: 1x1x33). Tiles clamped to the whole (7 x 33) output.
// NPU-LABEL: func.func @bf16_to_f32_3d
// NPU:         %[[ACC:.*]] = npu.alloc_local {double_buffer} : memref<7x33xf32, #npu.mem<ub>>
// NPU-NEXT:    %[[G_L:.*]] = npu.alloc_local {double_buffer} : memref<1x1x33xbf16, #npu.mem<ub>>
// NPU-NOT:     npu.alloc_local
// NPU:               npu.copy %{{.*}}, %{{.*}} : memref<1x1x?xbf16, strided<[330, 33, 1], offset: ?>>, memref<1x1x?xbf16, strided<[33, 33, 1]>, #npu.mem<ub>>
// NPU:           %[[ACC_T:.*]] = memref.subview %[[ACC]][0, 0]
// NPU-NEXT:      %[[OUT_G:.*]] = memref.subview %out[
// NPU-NEXT:      npu.copy %[[ACC_T]], %[[OUT_G]] : memref<?x?xf32, strided<[33, 1]>, #npu.mem<ub>>, memref<?x?xf32, strided<[33, 1], offset: ?>>
// NPU:         } {train.tiles = #train.tiles<rows = 7, d = 33>}
// HOST-LABEL: func.func @bf16_to_f32_3d
// HOST:         npu.alloc_local : memref<7x33xf32, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<1x1x33xbf16, #npu.mem<l2>>
// HOST-NOT:     npu.alloc_local
// HOST:         } {train.tiles = #train.tiles<rows = 7, d = 33>}
// RUN-3D: @bf16_to_f32_3d
// RUN-3D: out {{ *}}(7, 33) {{ *}}float32 {{.*}} ok
func.func @bf16_to_f32_3d(%g: memref<3x10x33xbf16>, %k: memref<6x5xi64>, %out: memref<7x33xf32>) {
  train.embedding_dense_backward grad(%g : memref<3x10x33xbf16>) indices(%k : memref<6x5xi64>)
      -> out(%out : memref<7x33xf32>) {num_weights = 7 : i64, padding_idx = 2 : i64}
  func.return
}

// Hand-set tile sizes are kept on every target: 3 row tiles (2, 2, 1 rows) x 4 d-chunks (5, 5, 5, 4).
// NPU-LABEL: func.func @hand_set
// NPU:         npu.alloc_local : memref<2x5xf32, #npu.mem<ub>>
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<2x5xbf16, #npu.mem<ub>>
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<1x5xbf16, #npu.mem<ub>>
// NPU:         } {train.tiles = #train.tiles<rows = 2, d = 5>}
// HOST-LABEL: func.func @hand_set
// HOST:         npu.alloc_local : memref<2x5xf32, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<2x5xbf16, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<1x5xbf16, #npu.mem<l2>>
// HOST:         } {train.tiles = #train.tiles<rows = 2, d = 5>}
// RUN-HAND: @hand_set
// RUN-HAND: out {{ *}}(5, 19) {{ *}}bfloat16 {{.*}} ok
func.func @hand_set(%g: memref<200x19xbf16>, %k: memref<200xi32>, %out: memref<5x19xbf16>) {
  train.embedding_dense_backward grad(%g : memref<200x19xbf16>) indices(%k : memref<200xi32>)
      -> out(%out : memref<5x19xbf16>) {num_weights = 5 : i64, padding_idx = 4 : i64, tile_sizes = #train.tiles<rows = 2, d = 5>}
  func.return
}
