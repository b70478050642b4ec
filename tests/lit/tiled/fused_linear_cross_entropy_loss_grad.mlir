// The fused linear cross-entropy gradient tiled for each shipped target (tile sizes set by hand
// for npu-a2, chosen by the search for host), each GEMM's operands in the matrix levels and its
// float32 accumulator in the accumulator level across its reduction (in chunks of h), DMA copies
// in and out, the logit and G tiles in the vector level; it runs and matches the reference on both.
// RUN: npugrad-opt %s --target npu-a2 --stage tiled | FileCheck %s --check-prefix=NPU
// RUN: npugrad-opt %s --target host --stage tiled | FileCheck %s --check-prefix=HOST
// RUN: npugrad-opt %s --target npu-a2 --report | FileCheck %s --check-prefix=REPORT
// RUN: npugrad-opt %s --target npu-a2 --stage run | FileCheck %s --check-prefix=EXEC
// RUN: npugrad-opt %s --target host --stage run | FileCheck %s --check-prefix=EXEC

// npu-a2's cube unit (L0C) and vector unit (UB) share no local memory: each logit tile reaches
// the UB through global memory and each G tile returns to the cube unit the same way. The
// schedule (passes/tiling/flce_phased.py): per vocabulary slab, phase 1 runs GEMM 1 and the
// softmax gradient per (vocabulary tile, token tile) pair and writes G into a shared slab;
// phase 2 runs GEMMs 2 and 3 as large GEMMs over the slab, accumulators resident in L0C.
// All local buffers are allocated once, at entry, and shared by the three GEMMs: one float32
// accumulator tile (bt x v, single: it fills the level), operand tiles in the matrix unit's
// layouts (A as m x k, B as k x n), staging tiles in L1 in the layouts operands are stored in
// (W as v x h for GEMM 1, G as k x m for GEMM 3), the vector tiles in the UB.
// NPU-DAG:   %gemm_acc = npu.alloc_local : memref<128x32xf32, #npu.mem<l0c>>
// NPU-DAG:   %gemm_lhs = npu.alloc_local {double_buffer} : memref<128x48xbf16, #npu.mem<l0a>>
// NPU-DAG:   %gemm_rhs = npu.alloc_local {double_buffer} : memref<48x32xbf16, #npu.mem<l0b>>
// NPU-DAG:   %gemm_lhs_stage = npu.alloc_local {double_buffer} : memref<128x48xbf16, #npu.mem<l1>>
// NPU-DAG:   %gemm_rhs_t_stage = npu.alloc_local {double_buffer} : memref<32x48xbf16, #npu.mem<l1>>
// NPU-DAG:   %gemm_rhs_stage = npu.alloc_local {double_buffer} : memref<48x32xbf16, #npu.mem<l1>>
// NPU-DAG:   %gemm_lhs_t_stage = npu.alloc_local {double_buffer} : memref<48x128xbf16, #npu.mem<l1>>
// NPU-DAG:   %logits = npu.alloc_local {double_buffer} : memref<128x32xf32, #npu.mem<ub>>
// NPU-DAG:   %grad_logits = npu.alloc_local {double_buffer} : memref<128x32xbf16, #npu.mem<ub>>
// NPU-DAG:   %saved_logits = npu.alloc_local {double_buffer} : memref<128xf32, #npu.mem<ub>>
// Workspaces all blocks share: G's slab (all 200 tokens x 160 of the 300 columns: never all of
// G), each block's logit tile, dX's float32 accumulator.
// NPU-DAG:   %grad_logits_slab = npu.alloc_shared() : memref<200x160xbf16>
// NPU-DAG:   %logits_tiles = npu.alloc_shared(%{{.*}}) : memref<?x32xf32>
// NPU-DAG:   %input_grad_acc = npu.alloc_shared() : memref<200x48xf32>
// W is no longer packed transposed by scalar loops in global memory: its copies transpose it.
// NPU-NOT:   weight_tile_packed
// NPU-NOT:   weight_pack
// NPU:       %bid = npu.block_idx
// NPU-NEXT:  %nblk = npu.block_dim
// NPU:       scf.for %slab = %{{.*}} to %{{.*}} step %{{.*}} {
// Phase 1: the (vocabulary tile, token tile) pairs of the slab, dealt round-robin.
// NPU:         scf.for %pair = %bid to %{{.*}} step %nblk {
// GEMM 1 into this block's logit tile: the accumulator starts at zero in L0C and stays there
// across H (chunks of h: the hand-set 64 is H's 48, a tile no wider than its dimension); X's
// chunk gm -> l1 -> l0a, W's gm -> l1, transposed into l0b.
// NPU:           %[[ACC1:.*]] = memref.subview %gemm_acc[0, 0]
// NPU-NEXT:      linalg.fill ins(%{{.*}} : f32) outs(%[[ACC1]] : memref<?x?xf32, strided<[32, 1]>, #npu.mem<l0c>>)
// NPU-NEXT:      scf.for
// NPU:             npu.copy %{{.*}}, %[[XS:.*]] : memref<?x?xbf16, strided<[48, 1], offset: ?>>, memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l1>>
// NPU:             npu.copy %[[XS]], %{{.*}} : memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l1>>, memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l0a>>
// NPU:             npu.copy %{{.*}}, %[[WS:.*]] : memref<?x?xbf16, strided<[48, 1], offset: ?>>, memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l1>>
// NPU:             npu.copy %[[WS]], %{{.*}} {transpose} : memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l1>>, memref<?x?xbf16, strided<[32, 1]>, #npu.mem<l0b>>
// NPU-NEXT:        linalg.generic {{.*}} doc = "GEMM 1: logits tile Z = X_t * W_v^T"} ins({{.*}}#npu.mem<l0a>>, {{.*}}#npu.mem<l0b>>) outs(%[[ACC1]] : {{.*}}#npu.mem<l0c>>)
// NPU:           npu.copy %[[ACC1]], %{{.*}} : memref<?x?xf32, strided<[32, 1]>, #npu.mem<l0c>>, memref<?x?xf32, strided<[32, 1], offset: ?>>
// The vector unit takes the tile's rows into the UB, computes G there, and writes it to the slab.
// NPU:           npu.copy %{{.*}}, %[[LOGITS:.*]] : memref<?x?xf32, strided<[32, 1], offset: ?>>, memref<?x?xf32, strided<[32, 1]>, #npu.mem<ub>>
// NPU:           math.exp
// NPU:           %[[GSLAB:.*]] = memref.subview %grad_logits_slab[
// NPU-NEXT:      npu.copy %{{.*}}, %[[GSLAB]] : memref<?x?xbf16, strided<[32, 1]>, #npu.mem<ub>>, memref<?x?xbf16, strided<[160, 1], offset: ?>>
// NPU:         npu.barrier
// Phase 2, GEMM 2: dX tiles dealt round-robin, each over the slab's columns with its accumulator
// resident in L0C; the copy out adds into dX's accumulator after the first slab.
// NPU:         %after_first_slab = arith.cmpi ne, %slab
// NPU:         scf.for %tile = %bid to %{{.*}} step %nblk {
// NPU:           doc = "GEMM 2: input grad tile dX_t += G * W_v"
// NPU:           scf.if %after_first_slab {
// NPU-NEXT:        npu.copy %{{.*}}, %{{.*}} {accumulate} : memref<?x?xf32, strided<[32, 1]>, #npu.mem<l0c>>, memref<?x?xf32, strided<[48, 1], offset: ?>>
// NPU-NEXT:      } else {
// NPU-NEXT:        npu.copy %{{.*}}, %{{.*}} : memref<?x?xf32, strided<[32, 1]>, #npu.mem<l0c>>, memref<?x?xf32, strided<[48, 1], offset: ?>>
// GEMM 3: dW tiles of the slab over all tokens; G's chunk is transposed by its copy into L0A,
// and the accumulator is rounded to bf16 by its copy out (A2's FixPipe).
// NPU:         scf.for %tile{{.*}} = %bid to %{{.*}} step %nblk {
// NPU:           npu.copy %{{.*}}, %{{.*}} {transpose} : memref<?x?xbf16, strided<[128, 1]>, #npu.mem<l1>>, memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l0a>>
// NPU:           doc = "GEMM 3: weight grad tile dW_v += G^T * X_t"
// NPU:           npu.copy %{{.*}}, %{{.*}} : memref<?x?xf32, strided<[32, 1]>, #npu.mem<l0c>>, memref<?x?xbf16, strided<[48, 1], offset: ?>>
// NPU:         npu.barrier
// NPU-NEXT:  } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 128, v = 32, h = 48>>}
// Each block rounds its share of dX's rows into dX through the UB.
// NPU:       npu.copy %{{.*}}, %{{.*}} : memref<?x?xf32, strided<[48, 1], offset: ?>>, memref<?x?xf32, strided<[32, 1]>, #npu.mem<ub>>
// NPU:       {train.role = #train.role<input_grad_final>}
// NPU:       npu.copy %{{.*}}, %{{.*}} : memref<?x?xbf16, strided<[32, 1]>, #npu.mem<ub>>, memref<?x?xbf16, strided<[48, 1], offset: ?>>
// The report: every copy follows one of npu-a2's paths (nothing is routed: no note).
// REPORT:      //   l1: {{[0-9]+}} B of 524288 B
// REPORT:      // bytes moved (all 20 blocks):
// REPORT-NEXT: //   gm -> l1:
// REPORT-NEXT: //   gm -> ub:
// REPORT-NEXT: //   l0c -> gm:
// REPORT-NEXT: //   l1 -> l0a:
// REPORT-NEXT: //   l1 -> l0b:
// REPORT-NEXT: //   ub -> gm:
// REPORT-NOT:  note:

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
