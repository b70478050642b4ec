// distribute-over-cores: with no --target the `tiled` stage spreads each op over the cores, one
// contiguous range per block, computed in place (no local buffers, no copies). The CPU is pinned
// (--cpu, Inputs/zen3.toml): the FLCE's tiles are sized from its caches, not the host's.
// RUN: npugrad-opt %s --stage tiled --cpu %S/../Inputs/zen3.toml | FileCheck %s --check-prefixes=CHECK,FLCE
// RUN: npugrad-opt %s -p distribute-over-cores | FileCheck %s
// --no-distribute keeps every op whole, on one core.
// RUN: npugrad-opt %s --stage tiled --no-distribute --cpu %S/../Inputs/zen3.toml | FileCheck %s --check-prefix=ONE

// BCE: elements of the flat arrays, whole cache lines (64 elements) per block, as many blocks
// as have 65536 elements each; mean BCE divides by the whole N once, before the split.
// CHECK-LABEL: func.func @bce_mean
// CHECK-DAG:     %[[MIN:.*]] = arith.constant 65536 : index
// CHECK-DAG:     %[[LINE:.*]] = arith.constant 64 : index
// CHECK:         %[[BID:.*]] = npu.block_idx
// CHECK-NEXT:    %[[NBLK:.*]] = npu.block_dim
// CHECK:         %[[U:.*]] = arith.divf
// CHECK:         %[[XF:.*]] = memref.collapse_shape %x {{\[\[}}0 : i64, 1 : i64]] : memref<?x?xf32> into memref<?xf32>
// CHECK:         %[[N:.*]] = memref.dim %[[XF]]
// CHECK:         %[[WANT:.*]] = arith.ceildivui %[[N]], %[[MIN]] : index
// CHECK:         %[[ACTIVE:.*]] = arith.minsi %[[NBLK]], %{{.*}} : index
// CHECK:         %[[PER:.*]] = arith.ceildivui %[[N]], %[[ACTIVE]] : index
// CHECK:         %[[LINES:.*]] = arith.ceildivui %[[PER]], %[[LINE]] : index
// CHECK:         %[[CHUNK:.*]] = arith.muli %[[LINES]], %[[LINE]] : index
// CHECK:         %[[LO:.*]] = arith.muli %[[BID]], %[[CHUNK]] : index
// CHECK:         %[[ANY:.*]] = arith.cmpi ult, %[[LO]], %[[N]] : index
// CHECK:         scf.if %[[ANY]] {
// CHECK:           %[[X:.*]] = memref.subview %[[XF]][%[[LO]]] [%{{.*}}] [1]
// CHECK:           scf.for
// CHECK:             arith.mulf %[[U]]
// CHECK-NOT:     npu.copy
// CHECK-NOT:     npu.alloc_local
// ONE-LABEL: func.func @bce_mean
// ONE-NOT:     npu.block_idx
// ONE:         train.binary_cross_entropy_grad
func.func @bce_mean(%x: memref<?x?xf32>, %y: memref<?x?xf32>, %d: memref<1xf32>, %dx: memref<?x?xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<?x?xf32>) input_y(%y : memref<?x?xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<?x?xf32>) {reduction = 1 : i64}
  func.return
}

// NLL: whole rows, enough of them for 65536 elements of out per block; each block's op zeroes
// and fills its own rows.
// CHECK-LABEL: func.func @nll_none
// CHECK:         %[[BID:.*]] = npu.block_idx
// CHECK:         %[[R0:.*]] = arith.muli %[[BID]], %[[CHUNK:.*]] : index
// CHECK:         scf.if
// CHECK:           %[[RN:.*]] = arith.minsi %[[CHUNK]], %{{.*}} : index
// CHECK:           %[[T:.*]] = memref.subview %t[%[[R0]]] [%[[RN]]] [1]
// CHECK:           %[[OUT:.*]] = memref.subview %out[%[[R0]], 0] [%[[RN]], %{{.*}}] [1, 1]
// CHECK:           %[[G:.*]] = memref.subview %g[%[[R0]]] [%[[RN]]] [1]
// CHECK:           train.nll_loss_backward grad_output(%[[G]] : {{.*}}) {{.*}} target(%[[T]] : {{.*}}) {{.*}} -> out(%[[OUT]] : {{.*}}) {reduction = 0 : i64}
func.func @nll_none(%g: memref<?xf32>, %self: memref<?x?xf32>, %t: memref<?xi64>, %w: memref<?xf32>,
                    %tw: memref<1xf32>, %out: memref<?x?xf32>) {
  train.nll_loss_backward grad_output(%g : memref<?xf32>) self(%self : memref<?x?xf32>) target(%t : memref<?xi64>)
      weight(%w : memref<?xf32>) total_weight(%tw : memref<1xf32>) -> out(%out : memref<?x?xf32>) {reduction = 0 : i64}
  func.return
}

// Embedding backward: contiguous rows of out per block, as many blocks as have 65536 elements
// of out each; each block scans all the indices, keeps those of its own rows (index - r0 below
// its row count, unsigned: one compare for both ends) in buckets numbered from r0, and writes
// its rows from a float32 scratch row (lowered here: no train op left).
// CHECK-LABEL: func.func @embedding
// CHECK:         %[[BID:.*]] = npu.block_idx
// CHECK:         %[[R0:.*]] = arith.muli %[[BID]], %[[CHUNK:.*]] : index
// CHECK:         scf.if
// CHECK:           %[[RN:.*]] = arith.minsi %[[CHUNK]], %{{.*}} : index
// CHECK:           %[[OFF_N:.*]] = arith.addi %[[RN]], %{{.*}} : index
// CHECK:           memref.alloc(%[[OFF_N]]) {alignment = 64 : i64} : memref<?xindex>
// CHECK:           %[[REL:.*]] = arith.subi %{{.*}}, %[[R0]] : index
// CHECK-NEXT:      %[[MINE:.*]] = arith.cmpi ult, %[[REL]], %[[RN]] : index
// CHECK:           %[[ACC:.*]] = memref.alloc(%{{.*}}) {alignment = 64 : i64} : memref<?xf32>
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %[[RN]] step
// CHECK:             %[[ROW:.*]] = arith.addi %[[R0]], %[[R]] : index
// CHECK:             memref.store %{{.*}}, %out[%[[ROW]], %{{.*}}] : memref<32000x?xf32>
// CHECK-NOT:     train.embedding_dense_backward
func.func @embedding(%grad: memref<?x?xf32>, %idx: memref<?xi64>, %out: memref<32000x?xf32>) {
  train.embedding_dense_backward grad(%grad : memref<?x?xf32>) indices(%idx : memref<?xi64>)
      -> out(%out : memref<32000x?xf32>) {num_weights = 32000 : i64}
  func.return
}

// Static sizes below two blocks' worth of work stay whole.
// CHECK-LABEL: func.func @small
// CHECK-NOT:     npu.block_idx
// CHECK:         train.binary_cross_entropy_grad
func.func @small(%x: memref<8x10xf32>, %y: memref<8x10xf32>, %d: memref<1xf32>, %dx: memref<8x10xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<8x10xf32>) input_y(%y : memref<8x10xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<8x10xf32>) {reduction = 2 : i64}
  func.return
}

// The fused linear cross-entropy gradient (fused first: the --stage run only): a wavefront over
// the blocks. Each owns a contiguous range of the token tiles (balanced by the fuse pass: their
// loop runs over tile indices, each tile's first row computed by the op marked token_start, which
// gives the block's first and end rows too); at step u block 0 zeroes vocabulary tile u, and
// every block takes tile u - bid - 1. Its token tiles go in groups of max(2 H, 2048) rows, and a
// group runs the loop body a phase at a time over its tiles (tiling/flce_groups.py): the logits
// tiles zeroed, GEMM 1 over chunks of H (512: the Zen 3's reduction chunk), each chunk of W's
// tile a view made outside the token loop (vectorize-contractions packs it once for the group),
// the softmax gradient, GEMM 2 over chunks of dX's columns (the first up to dX's first cache
// line plus 512, the others starting on a line), then, once the block before is done with step
// u - 1 (its flag, in the launch's %progress, a workspace of several blocks' launch, a counter
// on the stack of one block alone: block 0 waits for a count of 0), GEMM 3. Each token tile of
// the group has its entry in the stash (its logits, then G). The block waits once more at the
// end of the step (for a block with no token tiles) and sets its flag to u + 1; no barrier: a
// block waits only for the one before it. dW is float32, so its tiles accumulate in place (no
// ring, nothing to round).
// FLCE-LABEL: func.func @flce
// FLCE-NOT:     npu.alloc_shared
// FLCE:         %bid = npu.block_idx
// FLCE-NEXT:    %nblk = npu.block_dim
// FLCE:         %first_token_tile = arith.divui
// FLCE:         %end_token_tile = arith.divui
// FLCE:         %rows_lo = arith.minsi
// FLCE:         %rows_hi = arith.minsi
// FLCE:         %[[ROWS:.*]] = arith.subi %rows_hi, %rows_lo : index
// FLCE:         %[[SEVERAL:.*]] = arith.cmpi ugt, %nblk, %{{.*}} : index
// FLCE-NEXT:    %progress = scf.if %[[SEVERAL]] -> (memref<?xi64>) {
// FLCE-NEXT:      %[[LINES:.*]] = arith.muli %nblk, %[[EIGHT:.*]] : index
// FLCE-NEXT:      %[[SHARED:.*]] = npu.alloc_shared(%[[LINES]]) : memref<?xi64>
// FLCE-NEXT:      scf.yield %[[SHARED]] : memref<?xi64>
// FLCE-NEXT:    } else {
// FLCE-NEXT:      %[[OWN:.*]] = memref.alloca() {alignment = 64 : i64} : memref<8xi64>
// FLCE-NEXT:      memref.store %{{.*}}, %[[OWN]][%{{.*}}] : memref<8xi64>
// FLCE-NEXT:      %[[ANY:.*]] = "memref.cast"(%[[OWN]]) : (memref<8xi64>) -> memref<?xi64>
// FLCE-NEXT:      scf.yield %[[ANY]] : memref<?xi64>
// FLCE-NEXT:    }
// FLCE-NEXT:    %first_block = arith.cmpi eq, %bid, %[[ZERO:.*]] : index
// FLCE-NEXT:    %my_flag = arith.muli %bid, %[[EIGHT]] : index
// FLCE-NEXT:    %[[PREV_OR_0:.*]] = arith.maxui %bid, %[[C1:.*]] : index
// FLCE-NEXT:    %[[PREV:.*]] = arith.subi %[[PREV_OR_0]], %[[C1]] : index
// FLCE-NEXT:    %flag_before = arith.muli %[[PREV]], %[[EIGHT]] : index
// FLCE-NOT:     %last_flag
// Groups of max(2·H, 2048) rows' worth of token tiles, at most as many as the L2 (512 KiB)
// holds 186 x 176 float32 stash entries of (3), but 1024 rows' worth at least (6); the block's
// tiles split evenly over the groups that takes.
// FLCE:         %[[H:.*]] = memref.dim %w, %{{.*}} : memref<?x?xf32>
// FLCE-DAG:     %[[TWO:.*]] = arith.constant 2 : index
// FLCE-DAG:     %[[MIN_ROWS:.*]] = arith.constant 2048 : index
// FLCE-DAG:     %[[TILE_ROWS:.*]] = arith.constant 186 : index
// FLCE-DAG:     %[[CAP:.*]] = arith.constant 6 : index
// FLCE:         %block_tiles = arith.subi %end_token_tile, %first_token_tile : index
// FLCE-NEXT:    %[[TWO_H:.*]] = arith.muli %[[H]], %[[TWO]] : index
// FLCE-NEXT:    %group_rows = arith.maxui %[[TWO_H]], %[[MIN_ROWS]] : index
// FLCE-NEXT:    %[[TILES:.*]] = arith.ceildivui %group_rows, %[[TILE_ROWS]] : index
// FLCE-NEXT:    %[[AT_LEAST_ONE:.*]] = arith.maxui %[[TILES]], %{{.*}} : index
// FLCE-NEXT:    %most_tiles = arith.minui %[[AT_LEAST_ONE]], %[[CAP]] : index
// FLCE-NEXT:    %[[SOME:.*]] = arith.maxui %block_tiles, %{{.*}} : index
// FLCE-NEXT:    %groups = arith.ceildivui %[[SOME]], %most_tiles : index
// FLCE-NEXT:    %group_tiles = arith.ceildivui %[[SOME]], %groups : index
// FLCE-NEXT:    %stash_tiles = arith.minui %group_tiles, %block_tiles : index
// FLCE-NEXT:    %[[STASH_ROWS:.*]] = arith.muli %stash_tiles, %[[TILE_ROWS]] : index
// FLCE-NEXT:    %logits_stash = memref.alloc(%[[STASH_ROWS]]) {alignment = 64 : i64} : memref<?x176xf32>
// FLCE:         scf.for %[[U:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// FLCE:           %[[ZEROES:.*]] = arith.andi %{{.*}}, %first_block : i1
// FLCE-NEXT:      scf.if %[[ZEROES]] {
// FLCE-NOT:         npu.wait_flag
// FLCE:             %[[Z:.*]] = memref.subview %dw[
// FLCE-NEXT:        linalg.fill {train.role = #train.role<weight_grad_init>} ins(%{{.*}} : f32) outs(%[[Z]] :
// FLCE:           %[[NEED:.*]] = arith.select %first_block, %[[ZERO]], %[[U]] : index
// FLCE-NOT:       npu.wait_flag
// FLCE:           %[[BEHIND:.*]] = arith.addi %bid, %{{.*}} : index
// FLCE-NEXT:      %vtile = arith.subi %[[U]], %[[BEHIND]] : index
// FLCE:           %[[ACTIVE:.*]] = arith.andi
// FLCE-NEXT:      scf.if %[[ACTIVE]] {
// FLCE:             %[[W_TILE:.*]] = memref.subview %w[
// FLCE:             scf.for %group_start = %first_token_tile to %end_token_tile step %group_tiles {
// FLCE-NEXT:          %[[NEXT:.*]] = arith.addi %group_start, %group_tiles : index
// FLCE-NEXT:          %[[GROUP_END:.*]] = arith.minui %[[NEXT]], %end_token_tile : index
// FLCE-NEXT:          scf.for %[[I0:.*]] = %group_start to %[[GROUP_END]] step %{{.*}} {
// FLCE-NEXT:            %[[E0:.*]] = arith.subi %[[I0]], %group_start : index
// FLCE:                 %[[R0:.*]] = arith.muli %[[E0]], %{{.*}} : index
// FLCE-NEXT:            %[[Z0:.*]] = memref.subview %logits_stash[%[[R0]], 0]
// FLCE-NEXT:            linalg.fill ins(%{{.*}} : f32) outs(%[[Z0]] :
// FLCE-NEXT:          }
// FLCE-NOT:           doc = "GEMM
// FLCE:               %[[KC:.*]] = arith.constant 512 : index
// FLCE:               scf.for %chunk = %{{.*}} to %{{.*}} step %{{.*}} {
// FLCE:                 %chunk_lo = arith.muli %chunk, %[[KC]] : index
// FLCE:                 %[[W_CHUNK:.*]] = memref.subview %[[W_TILE]][0, %chunk_lo] [%{{.*}}, %chunk_size] [1, 1]
// FLCE-NEXT:            scf.for %{{.*}} = %group_start to %[[GROUP_END]] step %{{.*}} {
// FLCE:                   %[[Z1:.*]] = memref.subview %logits_stash[
// FLCE:                   %[[X_CHUNK:.*]] = memref.subview %{{.*}}[0, %chunk_lo] [%{{.*}}, %chunk_size] [1, 1]
// FLCE-NEXT:              linalg.generic {{.*}} doc = "GEMM 1{{.*}} ins(%[[X_CHUNK]], %[[W_CHUNK]] : {{.*}} outs(%[[Z1]] :
// FLCE:               scf.for %{{.*}} = %group_start to %[[GROUP_END]] step %{{.*}} {
// FLCE-NOT:             doc = "GEMM
// FLCE:                 math.exp
// FLCE-NOT:             doc = "GEMM
// FLCE:               %[[KC2:.*]] = arith.constant 512 : index
// FLCE:               %first_line = arith.minsi
// FLCE:               scf.for %[[C2:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// FLCE:                 %[[STEPS:.*]] = arith.muli %[[C2]], %[[KC2]] : index
// FLCE:                 %[[LATER:.*]] = arith.addi %[[STEPS]], %first_line : index
// FLCE:                 %[[LO2:.*]] = arith.select %{{.*}}, %{{.*}}, %[[LATER]] : index
// FLCE:                 %[[W_COLS:.*]] = memref.subview %[[W_TILE]][0, %[[LO2]]]
// FLCE-NEXT:            scf.for %{{.*}} = %group_start to %[[GROUP_END]] step %{{.*}} {
// FLCE:                   %[[G2:.*]] = memref.subview %logits_stash[
// FLCE-NEXT:              %[[DX_ROWS:.*]] = memref.subview %dx[
// FLCE:                   %[[DX_COLS:.*]] = memref.subview %[[DX_ROWS]][0, %[[LO2]]]
// FLCE-NEXT:              linalg.generic {{.*}} doc = "GEMM 2{{.*}} ins(%[[G2]], %[[W_COLS]] : {{.*}} outs(%[[DX_COLS]] :
// FLCE:               npu.wait_flag %progress[%flag_before], %[[NEED]] : memref<?xi64>
// FLCE-NEXT:          scf.for %{{.*}} = %group_start to %[[GROUP_END]] step %{{.*}} {
// FLCE:                 %[[G3:.*]] = memref.subview %logits_stash[
// FLCE-NEXT:            linalg.generic {{.*}} doc = "GEMM 3{{.*}} ins(%[[G3]],
// FLCE:               } {train.role = #train.role<token_loop>}
// FLCE-NOT:       weight_grad_final
// FLCE:           npu.wait_flag %progress[%flag_before], %[[NEED]] : memref<?xi64>
// FLCE-NEXT:      %[[DONE:.*]] = arith.addi %[[U]], %{{.*}} : index
// FLCE-NEXT:      npu.set_flag %progress[%my_flag], %[[DONE]] : memref<?xi64>
// FLCE-NEXT:    } {train.fused
// FLCE-NEXT:    memref.dealloc %logits_stash
// FLCE-NOT:     npu.barrier
// FLCE:         func.return
func.func @flce(%grad: memref<?xf32>, %x: memref<?x?xf32>, %w: memref<?x?xf32>, %mask: memref<?xi1>,
                %target: memref<?xi64>, %max: memref<?xf32>, %sum: memref<?xf32>,
                %dx: memref<?x?xf32>, %dw: memref<?x?xf32>) {
  train.fused_linear_cross_entropy_loss_grad grad(%grad : memref<?xf32>) input(%x : memref<?x?xf32>)
      weight(%w : memref<?x?xf32>) target_mask(%mask : memref<?xi1>) masked_target(%target : memref<?xi64>)
      logits_max(%max : memref<?xf32>) sum_exp_logits(%sum : memref<?xf32>)
      -> input_grad_out(%dx : memref<?x?xf32>) weight_grad_out(%dw : memref<?x?xf32>)
  func.return
}

// accumulate, bfloat16 outputs: each block widens its own rows of dX into the float32
// accumulator; at step u block 0 widens dW's rows of vocabulary tile u into the tile's slot of
// the ring (P + 3 slots), where the plain op zeroes them, once the last block is done with step
// u - 3 (it rounded the slot's previous tile, u - P - 3, at step u - 3: two steps of slack); the
// last block rounds tile u - P into dW right after its GEMM 3 on it, and after the step's second
// wait for the block before (a last block with no token tiles rounds only what every block
// before it has added).
// FLCE-LABEL: func.func @flce_accumulate
// FLCE:         %[[BLOCKS:.*]] = npu.block_dim
// FLCE-NEXT:    %[[SLOTS:.*]] = arith.addi %[[BLOCKS]], %[[THREE:.*]] : index
// FLCE:         %weight_grad_ring = npu.alloc_shared
// FLCE:         %[[ACC_ROWS:.*]] = memref.subview %input_grad_acc[%rows_lo, 0]
// FLCE-NEXT:    %[[DX_ROWS:.*]] = memref.subview %dx[%rows_lo, 0]
// FLCE:         %[[DX:.*]] = memref.load %[[DX_ROWS]]
// FLCE-NEXT:    %[[WIDE_DX:.*]] = arith.extf %[[DX]] : bf16 to f32
// FLCE-NEXT:    memref.store %[[WIDE_DX]], %[[ACC_ROWS]]
// FLCE:         } {train.role = #train.role<input_grad_init>}
// FLCE:         %last_block = arith.cmpi eq, %bid,
// FLCE:         %last_flag = arith.muli
// FLCE:         scf.for %[[U:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// FLCE:           %[[STARTS:.*]] = arith.andi %{{.*}}, %first_block : i1
// FLCE-NEXT:      scf.if %[[STARTS]] {
// FLCE-NEXT:        %[[ATLEAST:.*]] = arith.maxui %[[U]], %[[TWO:.*]] : index
// FLCE-NEXT:        %[[FREE:.*]] = arith.subi %[[ATLEAST]], %[[TWO]] : index
// FLCE-NEXT:        npu.wait_flag %progress[%last_flag], %[[FREE]] : memref<?xi64>
// FLCE:             %[[DW_ROWS:.*]] = memref.subview %dw[
// FLCE:             %[[SLOT:.*]] = memref.subview %weight_grad_ring[
// FLCE:                 %[[DW:.*]] = memref.load %[[DW_ROWS]]
// FLCE-NEXT:            %[[WIDE_DW:.*]] = arith.extf %[[DW]] : bf16 to f32
// FLCE-NEXT:            memref.store %[[WIDE_DW]], %[[SLOT]]
// FLCE:             } {train.role = #train.role<weight_grad_init>}
// FLCE:           %vtile = arith.subi
// FLCE:               npu.wait_flag %progress[%flag_before]
// FLCE-NEXT:          scf.for
// FLCE:                 doc = "GEMM 3
// FLCE:           npu.wait_flag %progress[%flag_before]
// FLCE-NEXT:      %[[ROUNDS:.*]] = arith.andi %{{.*}}, %last_block : i1
// FLCE-NEXT:      scf.if %[[ROUNDS]] {
// FLCE:             memref.subview %weight_grad_ring[
// FLCE:             arith.truncf {{.*}} : f32 to bf16
// FLCE:           } {train.role = #train.role<weight_grad_final>}
// FLCE-NEXT:      }
// FLCE-NEXT:      %[[DONE:.*]] = arith.addi %[[U]], %{{.*}} : index
// FLCE-NEXT:      npu.set_flag %progress[%my_flag], %[[DONE]] : memref<?xi64>
func.func @flce_accumulate(%grad: memref<?xf32>, %x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %mask: memref<?xi1>,
                           %target: memref<?xi64>, %max: memref<?xf32>, %sum: memref<?xf32>,
                           %dx: memref<?x?xbf16>, %dw: memref<?x?xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%grad : memref<?xf32>) input(%x : memref<?x?xbf16>)
      weight(%w : memref<?x?xbf16>) target_mask(%mask : memref<?xi1>) masked_target(%target : memref<?xi64>)
      logits_max(%max : memref<?xf32>) sum_exp_logits(%sum : memref<?xf32>)
      -> input_grad_out(%dx : memref<?x?xbf16>) weight_grad_out(%dw : memref<?x?xbf16>) {accumulate = true}
  func.return
}
