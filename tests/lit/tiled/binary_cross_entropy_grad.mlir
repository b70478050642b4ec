// tile-for-target on binary_cross_entropy_grad: tiles of n elements (tile_sizes) dealt
// round-robin to the blocks (scf.for %tile = %bid to %ntiles step %nblk); x, y, the weight and a
// per-element dloss copied into buffers of the vector level (npu-a2: the UB, double-buffered;
// host: L2), the tile computed there, dx copied out. A reduced dloss is read where it is.
// RUN: npugrad-opt %s --target npu-a2 --stage tiled | FileCheck %s --check-prefix=NPU
// RUN: npugrad-opt %s --target host --stage tiled | FileCheck %s --check-prefix=HOST
// RUN: npugrad-opt %s --target npu-a2 --stage run --entry hand_set_tile --seed 1 | FileCheck %s --check-prefix=RUN-HAND
// RUN: npugrad-opt %s --target host --stage run --entry hand_set_tile --seed 2 | FileCheck %s --check-prefix=RUN-HAND
// RUN: npugrad-opt %s --target npu-a2 --stage run --entry strided_rows --seed 3 | FileCheck %s --check-prefix=RUN-ROWS
// RUN: npugrad-opt %s --target host --stage run --entry strided_rows --seed 4 | FileCheck %s --check-prefix=RUN-ROWS

// Sum, dynamic 2-D: the arrays are collapsed to one dimension and cut into tiles of
// n = 8192 = (192 KiB / 2) / (3 × 4 B) elements (x, y and dx, double-buffered); each tile is the
// same op on the local tiles, with the global one-element dloss.
// NPU-LABEL: func.func @bce_sum
// NPU:         %[[BID:.*]] = npu.block_idx
// NPU-NEXT:    %[[NBLK:.*]] = npu.block_dim
// NPU-NEXT:    %[[X_L:.*]] = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
// NPU-NEXT:    %[[Y_L:.*]] = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
// NPU-NEXT:    %[[DX_L:.*]] = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
// NPU-NOT:     npu.alloc_local
// NPU:         %[[XF:.*]] = memref.collapse_shape %x {{\[\[}}0 : i64, 1 : i64]] : memref<?x?xf32> into memref<?xf32>
// NPU-NEXT:    %[[YF:.*]] = memref.collapse_shape %y
// NPU-NEXT:    %[[DXF:.*]] = memref.collapse_shape %dx
// NPU-NEXT:    %[[NTILES:.*]] = arith.ceildivui
// NPU-NEXT:    scf.for %[[TILE:.*]] = %[[BID]] to %[[NTILES]] step %[[NBLK]] {
// NPU:           %[[X_G:.*]] = memref.subview %[[XF]][%[[OFF:.*]]] [%[[SIZE:.*]]] [1] : memref<?xf32> to memref<?xf32, strided<[1], offset: ?>>
// NPU-NEXT:      %[[Y_G:.*]] = memref.subview %[[YF]][%[[OFF]]] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[DX_G:.*]] = memref.subview %[[DXF]][%[[OFF]]] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[X_T:.*]] = memref.subview %[[X_L]][0] [%[[SIZE]]] [1] : memref<8192xf32, #npu.mem<ub>> to memref<?xf32, strided<[1]>, #npu.mem<ub>>
// NPU-NEXT:      %[[Y_T:.*]] = memref.subview %[[Y_L]][0] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[DX_T:.*]] = memref.subview %[[DX_L]][0] [%[[SIZE]]] [1]
// NPU-NEXT:      npu.copy %[[X_G]], %[[X_T]] : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<ub>>
// NPU-NEXT:      npu.copy %[[Y_G]], %[[Y_T]]
// NPU-NEXT:      train.binary_cross_entropy_grad input_x(%[[X_T]] : memref<?xf32, strided<[1]>, #npu.mem<ub>>) input_y(%[[Y_T]] : memref<?xf32, strided<[1]>, #npu.mem<ub>>) dloss(%d : memref<1xf32>) -> dx(%[[DX_T]] : memref<?xf32, strided<[1]>, #npu.mem<ub>>) {reduction = 2 : i64}
// NPU-NEXT:      npu.copy %[[DX_T]], %[[DX_G]] : memref<?xf32, strided<[1]>, #npu.mem<ub>>, memref<?xf32, strided<[1], offset: ?>>
// NPU-NEXT:    } {train.tiles = #train.tiles<n = 8192>}
// NPU-NEXT:    func.return

// host: the tiles live in L2, once (no double buffering); n depends on this machine's L2.
// HOST-LABEL: func.func @bce_sum
// HOST:         %[[BID:.*]] = npu.block_idx
// HOST-NEXT:    %[[NBLK:.*]] = npu.block_dim
// HOST-NEXT:    npu.alloc_local : memref<[[N:[0-9]+]]xf32, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<[[N]]xf32, #npu.mem<l2>>
// HOST-NEXT:    npu.alloc_local : memref<[[N]]xf32, #npu.mem<l2>>
// HOST-NOT:     npu.alloc_local
// HOST:         scf.for %{{.*}} = %[[BID]] to %{{.*}} step %[[NBLK]] {
// HOST:           npu.copy {{.*}} : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<l2>>
// HOST-NEXT:      npu.copy {{.*}} : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<l2>>
// HOST-NEXT:      train.binary_cross_entropy_grad {{.*}} #npu.mem<l2>>) {reduction = 2 : i64}
// HOST-NEXT:      npu.copy {{.*}} : memref<?xf32, strided<[1]>, #npu.mem<l2>>, memref<?xf32, strided<[1], offset: ?>>
// HOST-NEXT:    } {train.tiles = #train.tiles<n = [[N]]>}
func.func @bce_sum(%x: memref<?x?xf32>, %y: memref<?x?xf32>, %d: memref<1xf32>, %dx: memref<?x?xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<?x?xf32>) input_y(%y : memref<?x?xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<?x?xf32>) {reduction = 2 : i64}
  func.return
}

// Mean: u = dloss/N is computed once, in float32, before the tile loop (as the untiled lowering
// does: a float16 dloss tile would round it); each tile then runs the untiled lowering's
// element loop on the local tiles. n = 12288 = 96 KiB / (4 × 2 B).
// NPU-LABEL: func.func @bce_mean_weighted
// NPU:         npu.alloc_local {double_buffer} : memref<12288xf16, #npu.mem<ub>>
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<12288xf16, #npu.mem<ub>>
// NPU-NEXT:    %[[W_L:.*]] = npu.alloc_local {double_buffer} : memref<12288xf16, #npu.mem<ub>>
// NPU-NEXT:    %[[DX_L:.*]] = npu.alloc_local {double_buffer} : memref<12288xf16, #npu.mem<ub>>
// NPU-NEXT:    %[[D:.*]] = memref.load %d[] : memref<f16>
// NPU-NEXT:    %[[D32:.*]] = arith.extf %[[D]] : f16 to f32
// NPU:         %[[U:.*]] = arith.divf %[[D32]], %{{.*}} : f32
// NPU:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// NPU-COUNT-3:   npu.copy {{.*}} : memref<?xf16, strided<[1], offset: ?>>, memref<?xf16, strided<[1]>, #npu.mem<ub>>
// NPU-NOT:       train.binary_cross_entropy_grad
// NPU:           scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// NPU:             arith.mulf %[[U]], %{{.*}} : f32
// NPU:             memref.load %[[W_T:.*]][%[[I]]] : memref<?xf16, strided<[1]>, #npu.mem<ub>>
// NPU:             arith.truncf %{{.*}} : f32 to f16
// NPU-NEXT:        memref.store %{{.*}}, %[[DX_T:.*]][%[[I]]] : memref<?xf16, strided<[1]>, #npu.mem<ub>>
// NPU-NEXT:      }
// NPU-NEXT:      npu.copy %[[DX_T]], %{{.*}} : memref<?xf16, strided<[1]>, #npu.mem<ub>>, memref<?xf16, strided<[1], offset: ?>>
// NPU-NEXT:    } {train.tiles = #train.tiles<n = 12288>}
// HOST-LABEL: func.func @bce_mean_weighted
// HOST-COUNT-4: npu.alloc_local : memref<{{[0-9]+}}xf16, #npu.mem<l2>>
// HOST:         arith.divf
// HOST:         scf.for
// HOST-NOT:       train.binary_cross_entropy_grad
// HOST:         } {train.tiles = #train.tiles<n = {{[0-9]+}}>}
func.func @bce_mean_weighted(%x: memref<?xf16>, %y: memref<?xf16>, %d: memref<f16>, %w: memref<?xf16>, %dx: memref<?xf16>) {
  train.binary_cross_entropy_grad input_x(%x : memref<?xf16>) input_y(%y : memref<?xf16>)
      dloss(%d : memref<f16>) weight(%w : memref<?xf16>) -> dx(%dx : memref<?xf16>)
  func.return
}

// None, one strided operand: tiles are pieces of the innermost dimension, one (i, j) row at a
// time, as rank-reducing subviews; dloss, one value per element, is tiled like x.
// NPU-LABEL: func.func @bce_none_strided
// NPU:         %[[BID:.*]] = npu.block_idx
// NPU-NEXT:    %[[NBLK:.*]] = npu.block_dim
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<12288xbf16, #npu.mem<ub>>
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<12288xbf16, #npu.mem<ub>>
// NPU-NEXT:    %[[D_L:.*]] = npu.alloc_local {double_buffer} : memref<12288xbf16, #npu.mem<ub>>
// NPU-NEXT:    npu.alloc_local {double_buffer} : memref<12288xbf16, #npu.mem<ub>>
// NPU-NOT:     memref.collapse_shape
// NPU:         %[[PER_ROW:.*]] = arith.ceildivui %{{.*}}, %{{.*}} : index
// NPU:         scf.for %[[TILE:.*]] = %[[BID]] to %{{.*}} step %[[NBLK]] {
// NPU-NEXT:      %[[ROW:.*]] = arith.divui %[[TILE]], %[[PER_ROW]] : index
// NPU-NEXT:      %[[J:.*]] = arith.remui %[[ROW]], %{{.*}} : index
// NPU-NEXT:      %[[I:.*]] = arith.divui %[[ROW]], %{{.*}} : index
// NPU-NEXT:      %[[PIECE:.*]] = arith.remui %[[TILE]], %[[PER_ROW]] : index
// NPU:           memref.subview %x[%[[I]], %[[J]], %[[OFF:.*]]] [1, 1, %[[SIZE:.*]]] [1, 1, 1] : memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>> to memref<?xbf16, strided<[?], offset: ?>>
// NPU:           %[[D_G:.*]] = memref.subview %d[%[[I]], %[[J]], %[[OFF]]] [1, 1, %[[SIZE]]] [1, 1, 1] : memref<?x?x?xbf16> to memref<?xbf16, strided<[1], offset: ?>>
// NPU:           %[[D_T:.*]] = memref.subview %[[D_L]][0] [%[[SIZE]]] [1]
// NPU:           npu.copy %[[D_G]], %[[D_T]]
// NPU-NEXT:      train.binary_cross_entropy_grad {{.*}} dloss(%[[D_T]] : memref<?xbf16, strided<[1]>, #npu.mem<ub>>) {{.*}} {reduction = 0 : i64}
// NPU-NEXT:      npu.copy
// NPU-NEXT:    } {train.tiles = #train.tiles<n = 12288>}
// HOST-LABEL: func.func @bce_none_strided
// HOST-COUNT-4: npu.alloc_local : memref<{{[0-9]+}}xbf16, #npu.mem<l2>>
// HOST:         arith.divui
// HOST:         train.binary_cross_entropy_grad {{.*}} dloss({{.*}}#npu.mem<l2>>)
func.func @bce_none_strided(%x: memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>, %y: memref<?x?x?xbf16>,
                            %d: memref<?x?x?xbf16>, %dx: memref<?x?x?xbf16>) {
  train.binary_cross_entropy_grad input_x(%x : memref<?x?x?xbf16, strided<[?, ?, ?], offset: ?>>)
      input_y(%y : memref<?x?x?xbf16>) dloss(%d : memref<?x?x?xbf16>) -> dx(%dx : memref<?x?x?xbf16>) {reduction = 0 : i64}
  func.return
}

// Rank 0: one tile of one element (a tile is never larger than a static operand).
// NPU-LABEL: func.func @bce_scalar
// NPU-COUNT-4: npu.alloc_local {double_buffer} : memref<1xf16, #npu.mem<ub>>
// NPU:         memref.expand_shape %x [] output_shape [1] : memref<f16> into memref<1xf16>
// NPU:         } {train.tiles = #train.tiles<n = 1>}
// HOST-LABEL: func.func @bce_scalar
// HOST-COUNT-4: npu.alloc_local : memref<1xf16, #npu.mem<l2>>
// HOST:         } {train.tiles = #train.tiles<n = 1>}
func.func @bce_scalar(%x: memref<f16>, %y: memref<f16>, %d: memref<f16>, %dx: memref<f16>) {
  train.binary_cross_entropy_grad input_x(%x : memref<f16>) input_y(%y : memref<f16>)
      dloss(%d : memref<f16>) -> dx(%dx : memref<f16>) {reduction = 0 : i64}
  func.return
}

// A hand-set tile is kept on both targets: 1000 elements in 11 tiles of 96 (the last of 40).
// NPU-LABEL: func.func @hand_set_tile
// NPU-DAG:     %[[C11:.*]] = arith.constant 11 : index
// NPU-DAG:     %[[C96:.*]] = arith.constant 96 : index
// NPU-COUNT-4: npu.alloc_local {double_buffer} : memref<96xf32, #npu.mem<ub>>
// NPU:         scf.for %[[TILE:.*]] = %{{.*}} to %[[C11]] step %{{.*}} {
// NPU-NEXT:      arith.muli %[[TILE]], %[[C96]] : index
// NPU:         } {train.tiles = #train.tiles<n = 96>}
// HOST-LABEL: func.func @hand_set_tile
// HOST-COUNT-4: npu.alloc_local : memref<96xf32, #npu.mem<l2>>
// HOST:         } {train.tiles = #train.tiles<n = 96>}
// RUN-HAND: @hand_set_tile
// RUN-HAND: dx {{ *}}(1000,) {{ *}}float32 {{.*}} ok
func.func @hand_set_tile(%x: memref<1000xf32>, %y: memref<1000xf32>, %d: memref<1xf32>, %w: memref<1000xf32>,
                         %dx: memref<1000xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<1000xf32>) input_y(%y : memref<1000xf32>)
      dloss(%d : memref<1xf32>) weight(%w : memref<1000xf32>) -> dx(%dx : memref<1000xf32>)
      {reduction = 1 : i64, tile_sizes = #train.tiles<n = 96>}
  func.return
}

// Strided rows, run: 5 rows of 7 in pieces of 3, 3 and 1: 15 tiles.
// NPU-LABEL: func.func @strided_rows
// NPU:         } {train.tiles = #train.tiles<n = 3>}
// RUN-ROWS: @strided_rows
// RUN-ROWS: dx {{ *}}(5, 7) {{ *}}float16 {{.*}} ok
func.func @strided_rows(%x: memref<5x7xf16, strided<[?, ?], offset: ?>>, %y: memref<5x7xf16>, %d: memref<1xf16>,
                        %dx: memref<5x7xf16, strided<[?, ?], offset: ?>>) {
  train.binary_cross_entropy_grad input_x(%x : memref<5x7xf16, strided<[?, ?], offset: ?>>) input_y(%y : memref<5x7xf16>)
      dloss(%d : memref<1xf16>) -> dx(%dx : memref<5x7xf16, strided<[?, ?], offset: ?>>)
      {reduction = 2 : i64, tile_sizes = #train.tiles<n = 3>}
  func.return
}
