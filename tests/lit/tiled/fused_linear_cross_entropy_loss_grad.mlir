// The fused linear cross-entropy gradient tiled for each shipped target (tile sizes set by hand
// for npu-a2, chosen by the search for host), each GEMM's operands in the matrix levels and its float32 accumulator in the
// accumulator level (H in chunks of h), DMA copies in and out, the logit and G tiles in the
// vector level; it runs and matches the reference on both.
// RUN: npugrad-opt %s --target npu-a2 --stage tiled | FileCheck %s --check-prefix=NPU
// RUN: npugrad-opt %s --target host --stage tiled | FileCheck %s --check-prefix=HOST
// RUN: npugrad-opt %s --target npu-a2 --report | FileCheck %s --check-prefix=REPORT
// RUN: npugrad-opt %s --target npu-a2 --stage run | FileCheck %s --check-prefix=EXEC
// RUN: npugrad-opt %s --target host --stage run | FileCheck %s --check-prefix=EXEC

// All local buffers are allocated once, at entry. On npu-a2 the
// matrix unit's operands come gm -> l1 -> l0a/l0b (npu-a2 has no path from gm into L0): every
// operand read from global memory has a staging tile in L1 (W's and X's as stored); the L0 tiles
// are in the matrix unit's layouts, A as m x k, B as k x n (gemm1_rhs is W's v x h chunk
// transposed, 64 x 32; gemm3_lhs is G's bt x v chunk transposed, 32 x 128). The accumulators
// (L0C) stay there across each reduction; the vector-level tiles are in the UB.
// NPU-DAG:   %gemm1_lhs = npu.alloc_local {double_buffer} : memref<128x64xbf16, #npu.mem<l0a>>
// NPU-DAG:   %gemm1_lhs_stage = npu.alloc_local {double_buffer} : memref<128x64xbf16, #npu.mem<l1>>
// NPU-DAG:   %gemm1_rhs = npu.alloc_local {double_buffer} : memref<64x32xbf16, #npu.mem<l0b>>
// NPU-DAG:   %gemm1_rhs_stage = npu.alloc_local {double_buffer} : memref<32x64xbf16, #npu.mem<l1>>
// NPU-DAG:   %gemm1_acc = npu.alloc_local {double_buffer} : memref<128x32xf32, #npu.mem<l0c>>
// NPU-DAG:   %gemm2_acc = npu.alloc_local {double_buffer} : memref<128x64xf32, #npu.mem<l0c>>
// NPU-DAG:   %gemm2_rhs_stage = npu.alloc_local {double_buffer} : memref<32x64xbf16, #npu.mem<l1>>
// NPU-DAG:   %gemm3_lhs = npu.alloc_local {double_buffer} : memref<32x128xbf16, #npu.mem<l0a>>
// NPU-DAG:   %gemm3_acc = npu.alloc_local {double_buffer} : memref<32x64xf32, #npu.mem<l0c>>
// NPU-DAG:   %logits = npu.alloc_local {double_buffer} : memref<128x32xf32, #npu.mem<ub>>
// NPU-DAG:   %grad_logits = npu.alloc_local {double_buffer} : memref<128x32xbf16, #npu.mem<ub>>
// NPU-DAG:   %saved_logits = npu.alloc_local {double_buffer} : memref<128xf32, #npu.mem<ub>>
// W is no longer packed transposed by scalar loops in global memory: its copies transpose it.
// NPU-NOT:   weight_tile_packed
// The wavefront over the blocks (passes/tiling/flce.py): dW's float32 tile accumulators are a
// ring in global memory that all blocks share, P + 2 tiles of 32 rows.
// NPU:       %[[P:.*]] = npu.block_dim
// NPU-NEXT:  %[[SLOTS:.*]] = arith.addi %[[P]], %{{.*}} : index
// NPU-NEXT:  %[[RINGROWS:.*]] = arith.muli %[[SLOTS]], %{{.*}} : index
// NPU-NEXT:  %weight_grad_ring = npu.alloc_shared(%[[RINGROWS]]) : memref<?x48xf32>
// NPU:       %bid = npu.block_idx
// NPU-NEXT:  %nblk = npu.block_dim
// Each block owns a contiguous range of token rows; it zeroes (and at the end rounds) its dX rows.
// NPU:       %rows_lo = arith.muli
// NPU:       %rows_hi = arith.minsi
// NPU:       %[[MINE:.*]] = memref.subview %input_grad_acc[%rows_lo, 0]
// NPU-NEXT:  linalg.fill {train.role = #train.role<input_grad_init>} ins(%{{.*}} : f32) outs(%[[MINE]] :
// Step u: every block zeroes its share of tile u's slot (slot u mod (P + 2)) ...
// NPU:       scf.for %[[U:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// NPU:         scf.if
// NPU:           arith.remui %[[U]], %{{.*}} : index
// NPU:           %[[Z:.*]] = memref.subview %weight_grad_ring[
// NPU-NEXT:      linalg.fill {train.role = #train.role<weight_grad_init>} ins(%{{.*}} : f32) outs(%[[Z]] :
// ... works on tile u - bid - 1, its accumulator in that tile's slot ...
// NPU:         %vtile = arith.subi %[[U]], %{{.*}} : index
// NPU:         scf.if
// NPU:           arith.remui %vtile, %{{.*}} : index
// NPU:           memref.subview %weight_grad_ring[
// NPU-NOT:       weight_pack
// NPU:           scf.for %{{.*}} = %rows_lo to %rows_hi step %{{.*}} {
// GEMM 1: the logit tile starts at zero in L0C and stays there across H (chunks of 64).
// NPU:         %[[ACC1:.*]] = memref.subview %gemm1_acc[0, 0]
// NPU-NEXT:    linalg.fill ins(%{{.*}} : f32) outs(%[[ACC1]] : memref<?x?xf32, strided<[32, 1]>, #npu.mem<l0c>>)
// NPU-NEXT:    scf.for
// NPU:           npu.copy %{{.*}}, %[[XS:.*]] : memref<?x?xbf16, strided<[48, 1], offset: ?>>, memref<?x?xbf16, strided<[64, 1]>, #npu.mem<l1>>
// NPU:           npu.copy %[[XS]], %{{.*}} : memref<?x?xbf16, strided<[64, 1]>, #npu.mem<l1>>, memref<?x?xbf16, strided<[64, 1]>, #npu.mem<l0a>>
// NPU:           npu.copy %{{.*}}, %[[WS:.*]] : memref<?x?xbf16, strided<[48, 1], offset: ?>>, memref<?x?xbf16, strided<[64, 1]>, #npu.mem<l1>>
// NPU:           npu.copy %[[WS]], %{{.*}} {transpose} : memref<?x?xbf16, strided<[64, 1]>, #npu.mem<l1>>, memref<?x?xbf16, strided<[32, 1]>, #npu.mem<l0b>>
// NPU-NEXT:      linalg.generic {{.*}} doc = "GEMM 1: logits tile Z = X_t * W_v^T"} ins({{.*}}#npu.mem<l0a>>, {{.*}}#npu.mem<l0b>>) outs(%[[ACC1]] : {{.*}}#npu.mem<l0c>>)
// NPU:         npu.copy %[[ACC1]], %{{.*}} : memref<?x?xf32, strided<[32, 1]>, #npu.mem<l0c>>, memref<?x?xf32, strided<[32, 1], offset: ?>, #npu.mem<ub>>
// NPU:         math.exp
// GEMM 2 into this block's dX rows, then GEMM 3: G's tile from the UB, transposed by its copy
// into L0A; X's through L1; into the ring's tile.
// NPU:         doc = "GEMM 2: input grad tile dX_t += G * W_v"
// NPU:         npu.copy %{{.*}}, %{{.*}} {transpose} : memref<?x?xbf16, strided<[32, 1], offset: ?>, #npu.mem<ub>>, memref<?x?xbf16, strided<[128, 1]>, #npu.mem<l0a>>
// NPU:         doc = "GEMM 3: weight grad tile dW_v += G^T * X_t"
// ... and rounds its share of tile u - P - 1, which the last block finished a step before, into dW.
// NPU:         scf.if
// NPU:           memref.subview %weight_grad_ring[
// NPU:           {train.role = #train.role<weight_grad_final>}
// NPU:         npu.barrier
// NPU-NEXT:  } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 128, v = 32, h = 64>>}
// NPU:       {train.role = #train.role<input_grad_final>}
// The report: the operands' copies follow npu-a2's paths (gm -> l1 -> l0a/l0b); what npu-a2 cannot
// do in one step (the float32 accumulators of GEMMs 2 and 3 in and out of gm, GEMM 1's tile
// to the UB, G into L0A) the cost model routes and notes.
// REPORT:      //   l1: {{[0-9]+}} B of 524288 B
// REPORT:      // bytes moved (all 20 blocks):
// REPORT-NEXT: //   gm -> l0c:
// REPORT-NEXT: //   gm -> l1:
// REPORT-NEXT: //   l0c -> gm:
// REPORT-NEXT: //   l0c -> ub:
// REPORT-NEXT: //   l1 -> l0a:
// REPORT-NEXT: //   l1 -> l0b:
// REPORT-NEXT: //   ub -> l0a:
// REPORT:      //   note: gm -> l0c is no route of npu-a2

// HOST-DAG:  %logits = npu.alloc_local : memref<{{[0-9]+}}x{{[0-9]+}}xf32, #npu.mem<l2>>
// HOST-DAG:  %gemm1_acc = npu.alloc_local : memref<{{.*}}#npu.mem<l2>>
// HOST:      } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = {{[0-9]+}}, v = {{[0-9]+}}, h = {{[0-9]+}}>>}

// EXEC:      input_grad_out {{.*}} bfloat16 {{.*}} ok
// EXEC-NEXT: weight_grad_out {{.*}} bfloat16 {{.*}} ok
func.func @flce(%g: memref<200xf32>, %x: memref<200x48xbf16>, %w: memref<300x48xbf16>, %mask: memref<25xui8>,
                %t: memref<200xi64>, %lm: memref<200xf32>, %se: memref<200xf32>,
                %gx: memref<200x48xbf16>, %gw: memref<300x48xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<200xf32>) input(%x : memref<200x48xbf16>)
      weight(%w : memref<300x48xbf16>) target_mask(%mask : memref<25xui8>) masked_target(%t : memref<200xi64>)
      logits_max(%lm : memref<200xf32>) sum_exp_logits(%se : memref<200xf32>)
      -> input_grad_out(%gx : memref<200x48xbf16>) weight_grad_out(%gw : memref<300x48xbf16>)
      {tile_sizes = #train.tiles<bt = 128, v = 32, h = 64>}
  func.return
}
