// tile-for-target on apply_fused_ema_adam: tiles of n elements (tile_sizes) dealt round-robin to
// the blocks (scf.for %tile = %bid to %ntiles step %nblk); grad and the four states copied into
// buffers of the vector level (npu-a2: the UB, double-buffered; host: L2), the same op run on
// them, the states (updated in place) copied back. step and the hyperparameters, one and six
// values, are read where they are.
// RUN: npugrad-opt %s --target npu-a2 --stage tiled | FileCheck %s --check-prefix=NPU
// RUN: npugrad-opt %s --target host --stage tiled | FileCheck %s --check-prefix=HOST
// RUN: npugrad-opt %s --target npu-a2 --stage run --entry hand_set_tile --seed 1 | FileCheck %s --check-prefix=RUN-HAND
// RUN: npugrad-opt %s --target host --stage run --entry hand_set_tile --seed 2 | FileCheck %s --check-prefix=RUN-HAND
// RUN: npugrad-opt %s --target npu-a2 --stage run --entry strided_rows --seed 3 | FileCheck %s --check-prefix=RUN-ROWS
// RUN: npugrad-opt %s --target host --stage run --entry strided_rows --seed 4 | FileCheck %s --check-prefix=RUN-ROWS

// Dynamic 2-D float32 with run-time hyperparameters: collapsed to one dimension, tiles of
// n = 4864 elements (96 KiB / (5 × 4 B), rounded down to a multiple of 64).
// NPU-LABEL: func.func @ema_dynamic
// NPU:         %[[BID:.*]] = npu.block_idx
// NPU-NEXT:    %[[NBLK:.*]] = npu.block_dim
// NPU-NEXT:    %[[G_L:.*]] = npu.alloc_local {double_buffer} : memref<4864xf32, #npu.mem<ub>>
// NPU-NEXT:    %[[P_L:.*]] = npu.alloc_local {double_buffer} : memref<4864xf32, #npu.mem<ub>>
// NPU-NEXT:    %[[M_L:.*]] = npu.alloc_local {double_buffer} : memref<4864xf32, #npu.mem<ub>>
// NPU-NEXT:    %[[V_L:.*]] = npu.alloc_local {double_buffer} : memref<4864xf32, #npu.mem<ub>>
// NPU-NEXT:    %[[S_L:.*]] = npu.alloc_local {double_buffer} : memref<4864xf32, #npu.mem<ub>>
// NPU-NOT:     npu.alloc_local
// NPU:         %[[GF:.*]] = memref.collapse_shape %grad
// NPU:         %[[NTILES:.*]] = arith.ceildivui
// NPU-NEXT:    scf.for %[[TILE:.*]] = %[[BID]] to %[[NTILES]] step %[[NBLK]] {
// NPU:           %[[G_G:.*]] = memref.subview %[[GF]][%[[OFF:.*]]] [%[[SIZE:.*]]] [1] : memref<?xf32> to memref<?xf32, strided<[1], offset: ?>>
// NPU-NEXT:      %[[P_G:.*]] = memref.subview %{{.*}}[%[[OFF]]] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[M_G:.*]] = memref.subview %{{.*}}[%[[OFF]]] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[V_G:.*]] = memref.subview %{{.*}}[%[[OFF]]] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[S_G:.*]] = memref.subview %{{.*}}[%[[OFF]]] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[G_T:.*]] = memref.subview %[[G_L]][0] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[P_T:.*]] = memref.subview %[[P_L]][0] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[M_T:.*]] = memref.subview %[[M_L]][0] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[V_T:.*]] = memref.subview %[[V_L]][0] [%[[SIZE]]] [1]
// NPU-NEXT:      %[[S_T:.*]] = memref.subview %[[S_L]][0] [%[[SIZE]]] [1] : memref<4864xf32, #npu.mem<ub>> to memref<?xf32, strided<[1]>, #npu.mem<ub>>
// NPU-NEXT:      npu.copy %[[G_G]], %[[G_T]] : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<ub>>
// NPU-NEXT:      npu.copy %[[P_G]], %[[P_T]]
// NPU-NEXT:      npu.copy %[[M_G]], %[[M_T]]
// NPU-NEXT:      npu.copy %[[V_G]], %[[V_T]]
// NPU-NEXT:      npu.copy %[[S_G]], %[[S_T]]
// NPU-NEXT:      train.apply_fused_ema_adam grad(%[[G_T]] : memref<?xf32, strided<[1]>, #npu.mem<ub>>) step(%step : memref<1xi64>) hyperparameters(%h : memref<6xf32>) -> var(%[[P_T]] : {{.*}}) m(%[[M_T]] : {{.*}}) v(%[[V_T]] : {{.*}}) s(%[[S_T]] : memref<?xf32, strided<[1]>, #npu.mem<ub>>) {mode = 0 : i64}
// NPU-NEXT:      npu.copy %[[P_T]], %[[P_G]] : memref<?xf32, strided<[1]>, #npu.mem<ub>>, memref<?xf32, strided<[1], offset: ?>>
// NPU-NEXT:      npu.copy %[[M_T]], %[[M_G]]
// NPU-NEXT:      npu.copy %[[V_T]], %[[V_G]]
// NPU-NEXT:      npu.copy %[[S_T]], %[[S_G]]
// NPU-NEXT:    } {train.tiles = #train.tiles<n = 4864>}
// NPU-NEXT:    func.return

// host: the tiles live in L2, once (no double buffering); n depends on this machine's L2.
// HOST-LABEL: func.func @ema_dynamic
// HOST:         %[[BID:.*]] = npu.block_idx
// HOST-NEXT:    %[[NBLK:.*]] = npu.block_dim
// HOST-NEXT:    npu.alloc_local : memref<[[N:[0-9]+]]xf32, #npu.mem<l2>>
// HOST-COUNT-4: npu.alloc_local : memref<[[N]]xf32, #npu.mem<l2>>
// HOST-NOT:     npu.alloc_local
// HOST:         scf.for %{{.*}} = %[[BID]] to %{{.*}} step %[[NBLK]] {
// HOST-COUNT-5:   npu.copy {{.*}} : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<l2>>
// HOST-NEXT:      train.apply_fused_ema_adam grad({{.*}}#npu.mem<l2>>) step(%step : memref<1xi64>) hyperparameters(%h : memref<6xf32>)
// HOST-COUNT-4:   npu.copy {{.*}} : memref<?xf32, strided<[1]>, #npu.mem<l2>>, memref<?xf32, strided<[1], offset: ?>>
// HOST-NEXT:    } {train.tiles = #train.tiles<n = [[N]]>}
func.func @ema_dynamic(%grad: memref<?x?xf32>, %step: memref<1xi64>, %h: memref<6xf32>, %var: memref<?x?xf32>,
                       %m: memref<?x?xf32>, %v: memref<?x?xf32>, %s: memref<?x?xf32>) {
  train.apply_fused_ema_adam grad(%grad : memref<?x?xf32>) step(%step : memref<1xi64>) hyperparameters(%h : memref<6xf32>)
      -> var(%var : memref<?x?xf32>) m(%m : memref<?x?xf32>) v(%v : memref<?x?xf32>) s(%s : memref<?x?xf32>) {mode = 0 : i64}
  func.return
}

// One strided state: tiles are pieces of rows. bfloat16: n = 9792 (96 KiB / (5 × 2 B)).
// NPU-LABEL: func.func @ema_strided
// NPU-COUNT-5: npu.alloc_local {double_buffer} : memref<9792xbf16, #npu.mem<ub>>
// NPU-NOT:     memref.collapse_shape
// NPU:         scf.for %[[TILE:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// NPU-NEXT:      %[[ROW:.*]] = arith.divui %[[TILE]], %{{.*}} : index
// NPU:           memref.subview %m[%[[ROW]], %{{.*}}] [1, %{{.*}}] [1, 1] : memref<?x?xbf16, strided<[?, ?], offset: ?>> to memref<?xbf16, strided<[?], offset: ?>>
// NPU:           train.apply_fused_ema_adam
// NPU-SAME:        {lr = 1.000000e-04 : f64, beta2 = 9.500000e-01 : f64, weight_decay = 1.000000e-02 : f64}
// NPU:         } {train.tiles = #train.tiles<n = 9792>}
// HOST-LABEL: func.func @ema_strided
// HOST-COUNT-5: npu.alloc_local : memref<{{[0-9]+}}xbf16, #npu.mem<l2>>
// HOST:         arith.divui
func.func @ema_strided(%grad: memref<?x?xbf16>, %step: memref<1xi64>, %var: memref<?x?xbf16>,
                       %m: memref<?x?xbf16, strided<[?, ?], offset: ?>>, %v: memref<?x?xbf16>, %s: memref<?x?xbf16>) {
  train.apply_fused_ema_adam grad(%grad : memref<?x?xbf16>) step(%step : memref<1xi64>)
      -> var(%var : memref<?x?xbf16>) m(%m : memref<?x?xbf16, strided<[?, ?], offset: ?>>) v(%v : memref<?x?xbf16>)
      s(%s : memref<?x?xbf16>) {lr = 1.0e-04 : f64, beta2 = 0.95 : f64, weight_decay = 0.01 : f64}
  func.return
}

// A hand-set tile is kept on both targets: 64 × 48 = 3072 elements in 7 tiles of 500 (the last
// of 72). Run on random inputs against the reference.
// NPU-LABEL: func.func @hand_set_tile
// NPU-DAG:     %[[C7:.*]] = arith.constant 7 : index
// NPU-COUNT-5: npu.alloc_local {double_buffer} : memref<500xf16, #npu.mem<ub>>
// NPU:         scf.for %{{.*}} = %{{.*}} to %[[C7]] step %{{.*}} {
// NPU:         } {train.tiles = #train.tiles<n = 500>}
// HOST-LABEL: func.func @hand_set_tile
// HOST-COUNT-5: npu.alloc_local : memref<500xf16, #npu.mem<l2>>
// HOST:         } {train.tiles = #train.tiles<n = 500>}
// RUN-HAND: @hand_set_tile
// RUN-HAND: var {{ *}}(64, 48) {{ *}}float16 {{.*}} ok
// RUN-HAND: m {{ *}}(64, 48) {{ *}}float16 {{.*}} ok
// RUN-HAND: v {{ *}}(64, 48) {{ *}}float16 {{.*}} ok
// RUN-HAND: s {{ *}}(64, 48) {{ *}}float16 {{.*}} ok
func.func @hand_set_tile(%grad: memref<64x48xf16>, %step: memref<1xi64>, %var: memref<64x48xf16>,
                         %m: memref<64x48xf16>, %v: memref<64x48xf16>, %s: memref<64x48xf16>) {
  train.apply_fused_ema_adam grad(%grad : memref<64x48xf16>) step(%step : memref<1xi64>)
      -> var(%var : memref<64x48xf16>) m(%m : memref<64x48xf16>) v(%v : memref<64x48xf16>) s(%s : memref<64x48xf16>)
      {weight_decay = 0.01 : f64, tile_sizes = #train.tiles<n = 500>}
  func.return
}

// Strided rows, run: 6 rows of 7 in pieces of 4 and 3: 12 tiles.
// RUN-ROWS: @strided_rows
// RUN-ROWS: var {{ *}}(6, 7) {{ *}}float32 {{.*}} ok
// RUN-ROWS: m {{ *}}(6, 7) {{ *}}float32 {{.*}} ok
// RUN-ROWS: v {{ *}}(6, 7) {{ *}}float32 {{.*}} ok
// RUN-ROWS: s {{ *}}(6, 7) {{ *}}float32 {{.*}} ok
func.func @strided_rows(%grad: memref<6x7xf32, strided<[?, ?], offset: ?>>, %step: memref<1xi64>, %var: memref<6x7xf32>,
                        %m: memref<6x7xf32>, %v: memref<6x7xf32, strided<[?, ?], offset: ?>>, %s: memref<6x7xf32>) {
  train.apply_fused_ema_adam grad(%grad : memref<6x7xf32, strided<[?, ?], offset: ?>>) step(%step : memref<1xi64>)
      -> var(%var : memref<6x7xf32>) m(%m : memref<6x7xf32>) v(%v : memref<6x7xf32, strided<[?, ?], offset: ?>>)
      s(%s : memref<6x7xf32>) {mode = 0 : i64, bias_correction = false, weight_decay = 0.1 : f64, tile_sizes = #train.tiles<n = 4>}
  func.return
}
