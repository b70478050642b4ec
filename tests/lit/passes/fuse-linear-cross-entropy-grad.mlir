// fuse-linear-cross-entropy-grad: the op becomes one nest over vocabulary tiles (outer) and token
// tiles (inner). What later passes need to find in it is said by typed attributes, never by the
// IR's text: the nest by #train.fused (the op it computes and its tiles), its parts by #train.role,
// its three contractions by #train.contraction (with the tile dims of their loops), and the
// tile-sized scratch a tiling may move into local memory by npu.promote.
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{tile_bt=32 tile_v=64}' | FileCheck %s
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{tile_bt=32 tile_v=64 balance_blocks=3}' | FileCheck %s --check-prefix=BALANCE

// balance_blocks=3: the token tiles spread BT evenly over whole units of the cpu's 6 micro-kernel
// rows (x86-64 with 16 vector registers: 6 x 2 vectors), at most 32 rows (5 units) each, their
// count ceil(units / 5) rounded up to a multiple of 3 (at most the units: no tile is empty), and
// the loop runs over tile indices: tile i starts at min(BT, ceil(i * units / count) * 6)
// (linear_nests.balanced_starts), marked token_start. (BT = 2048 with tiles of 186 on 2 blocks:
// 12 tiles of 174 and 168 rows (the last 164), 1026 + 1022 rows a block, where uniform steps of 174 gave
// 1044 + 1004.)
// BALANCE:       %[[BT:.*]] = memref.dim %x, %{{.*}} : memref<?x?xbf16>
// BALANCE:       %token_units = arith.ceildivui %[[BT]], %[[C6:.*]] : index
// BALANCE-NEXT:  %[[BY_TILE:.*]] = arith.ceildivui %token_units, %[[C5:.*]] : index
// BALANCE-NEXT:  %[[PER_BLOCK:.*]] = arith.ceildivui %[[BY_TILE]], %[[C3:.*]] : index
// BALANCE-NEXT:  %[[ROUNDED:.*]] = arith.muli %[[PER_BLOCK]], %[[C3]] : index
// BALANCE-NEXT:  %[[NOT_EMPTY:.*]] = arith.minui %[[ROUNDED]], %token_units : index
// BALANCE-NEXT:  %token_tiles = arith.maxui %[[NOT_EMPTY]], %{{.*}} : index
// BALANCE:       scf.for %token_tile = %{{.*}} to %token_tiles step %[[C1:.*]] {
// BALANCE-NEXT:    %[[SCALED:.*]] = arith.muli %token_tile, %token_units : index
// BALANCE-NEXT:    %[[UNITS_IN:.*]] = arith.ceildivui %[[SCALED]], %token_tiles : index
// BALANCE-NEXT:    %[[ROW:.*]] = arith.muli %[[UNITS_IN]], %[[C6]] : index
// BALANCE-NEXT:    %t0 = arith.minsi %[[ROW]], %[[BT]] {train.role = #train.role<token_start>} : index
// BALANCE-NEXT:    %[[NEXT:.*]] = arith.addi %token_tile, %[[C1]] : index
// BALANCE-NEXT:    %[[SCALED1:.*]] = arith.muli %[[NEXT]], %token_units : index
// BALANCE-NEXT:    %[[UNITS_IN1:.*]] = arith.ceildivui %[[SCALED1]], %token_tiles : index
// BALANCE-NEXT:    %[[ROW1:.*]] = arith.muli %[[UNITS_IN1]], %[[C6]] : index
// BALANCE-NEXT:    %[[END:.*]] = arith.minsi %[[ROW1]], %[[BT]] : index
// BALANCE-NEXT:    %tb = arith.subi %[[END]], %t0 : index
// BALANCE-NEXT:    memref.subview %x[%t0, 0] [%tb, %{{.*}}] [1, 1]
// BALANCE:       } {train.role = #train.role<token_loop>}

// CHECK-LABEL: func.func @flce(
// CHECK:         %input_grad_acc = memref.alloc({{.*}}) {alignment = 64 : i64} : memref<?x?xf32>
// CHECK:         linalg.fill {train.role = #train.role<input_grad_init>} {{.*}} outs(%input_grad_acc
// CHECK:         %logits = memref.alloc() {alignment = 64 : i64, npu.promote = #npu.role<vector>} : memref<32x64xf32>
// CHECK:         %grad_logits = memref.alloc() {{.*}}npu.promote = #npu.role<vector>} : memref<32x64xbf16>
// CHECK:         %saved_logits = memref.alloc() {{.*}}npu.promote = #npu.role<vector>} : memref<32xf32>
// CHECK:         scf.for
// CHECK:           linalg.fill {train.role = #train.role<weight_grad_init>}
// CHECK:           scf.for
// CHECK:             linalg.generic {{.*}} attrs = {train.contraction = #train.contraction<logits, dims = [bt, h, v]>}
// CHECK:             math.exp
// CHECK:             linalg.generic {{.*}} attrs = {train.contraction = #train.contraction<input_grad, dims = [bt, v, h]>}
// CHECK:             linalg.generic {{.*}} attrs = {train.contraction = #train.contraction<weight_grad, dims = [v, bt, h]>}
// CHECK:           } {train.role = #train.role<token_loop>}
// CHECK:         } {train.role = #train.role<weight_grad_final>}
// CHECK-NEXT:  } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 32, v = 64>>}
// CHECK:       } {train.role = #train.role<input_grad_final>}
// CHECK-NOT:   train.fused_linear_cross_entropy_loss_grad {{.*}}input(
func.func @flce(%g: memref<?xf32>, %x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %mask: memref<?xi1>,
                %t: memref<?xi32>, %lm: memref<?xf32>, %se: memref<?xf32>,
                %gx: memref<?x?xbf16>, %gw: memref<?x?xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<?xf32>) input(%x : memref<?x?xbf16>)
      weight(%w : memref<?x?xbf16>) target_mask(%mask : memref<?xi1>) masked_target(%t : memref<?xi32>)
      logits_max(%lm : memref<?xf32>) sum_exp_logits(%se : memref<?xf32>)
      -> input_grad_out(%gx : memref<?x?xbf16>) weight_grad_out(%gw : memref<?x?xbf16>)
  func.return
}

// accumulate: the float32 accumulators start from what the outputs hold, widened, where the
// plain op zeroes them: dX's once, each vocabulary tile's dW as the tile starts.
// CHECK-LABEL: func.func @flce_accumulate(
// CHECK:         %input_grad_acc = memref.alloc({{.*}}) {alignment = 64 : i64} : memref<?x?xf32>
// CHECK-NOT:     linalg.fill
// CHECK:         scf.for
// CHECK-NEXT:      scf.for
// CHECK-NEXT:        %[[DX:.*]] = memref.load %gx[{{.*}}] : memref<?x?xbf16>
// CHECK-NEXT:        %[[WIDE_DX:.*]] = arith.extf %[[DX]] : bf16 to f32
// CHECK-NEXT:        memref.store %[[WIDE_DX]], %input_grad_acc[{{.*}}] : memref<?x?xf32>
// CHECK:         } {train.role = #train.role<input_grad_init>}
// CHECK:         scf.for %[[V0:.*]] = {{.*}} {
// CHECK:           %[[ACC_T:.*]] = memref.subview %weight_grad_acc[0, 0]
// CHECK-NEXT:      %[[GW_T:.*]] = memref.subview %gw[%[[V0]], 0]
// CHECK-NOT:       linalg.fill
// CHECK:           %[[DW:.*]] = memref.load %[[GW_T]][{{.*}}] : memref<?x?xbf16, strided<[?, 1], offset: ?>>
// CHECK-NEXT:      %[[WIDE_DW:.*]] = arith.extf %[[DW]] : bf16 to f32
// CHECK-NEXT:      memref.store %[[WIDE_DW]], %[[ACC_T]][{{.*}}]
// CHECK:           } {train.role = #train.role<weight_grad_init>}
// CHECK:         } {train.role = #train.role<weight_grad_final>}
// CHECK:       } {train.role = #train.role<input_grad_final>}
func.func @flce_accumulate(%g: memref<?xf32>, %x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %mask: memref<?xi1>,
                           %t: memref<?xi32>, %lm: memref<?xf32>, %se: memref<?xf32>,
                           %gx: memref<?x?xbf16>, %gw: memref<?x?xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<?xf32>) input(%x : memref<?x?xbf16>)
      weight(%w : memref<?x?xbf16>) target_mask(%mask : memref<?xi1>) masked_target(%t : memref<?xi32>)
      logits_max(%lm : memref<?xf32>) sum_exp_logits(%se : memref<?xf32>)
      -> input_grad_out(%gx : memref<?x?xbf16>) weight_grad_out(%gw : memref<?x?xbf16>) {accumulate = true}
  func.return
}

// Float32 outputs are their own accumulators: accumulating, nothing starts them (no init, no
// final rounding); GEMMs 2 and 3 add into dX and dW themselves.
// CHECK-LABEL: func.func @flce_accumulate_f32(
// CHECK-NOT:     train.role = #train.role<{{input|weight}}_grad_{{init|final}}>
// CHECK:         linalg.generic {{.*}} outs(%{{.*}} : memref<?x?xf32, strided<[?, 1], offset: ?>>) attrs =  {train.contraction = #train.contraction<input_grad
// CHECK-NOT:     train.role = #train.role<{{input|weight}}_grad_{{init|final}}>
// CHECK:         linalg.generic {{.*}} attrs =  {train.contraction = #train.contraction<weight_grad
// CHECK-NOT:     train.role = #train.role<{{input|weight}}_grad_{{init|final}}>
// CHECK:         func.return
func.func @flce_accumulate_f32(%g: memref<?xf32>, %x: memref<?x?xf32>, %w: memref<?x?xf32>, %mask: memref<?xi1>,
                               %t: memref<?xi32>, %p: memref<?x?xf32>, %gx: memref<?x?xf32>, %gw: memref<?x?xf32>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<?xf32>) input(%x : memref<?x?xf32>)
      weight(%w : memref<?x?xf32>) target_mask(%mask : memref<?xi1>) masked_target(%t : memref<?xi32>)
      softmax(%p : memref<?x?xf32>)
      -> input_grad_out(%gx : memref<?x?xf32>) weight_grad_out(%gw : memref<?x?xf32>) {accumulate = true}
  func.return
}
