// The forward statistics tiled for each shipped target: GEMM 1's operands in the matrix levels
// (through L1 on npu-a2) and its float32 accumulator in the accumulator level, the logit tile in the vector level, DMA
// copies in and out; the blocks split the work by token tiles on npu-a2 (dealt round-robin:
// its matrix unit takes whole tiles) and by contiguous ranges of rows, even to one row, on the
// host (each owns its rows' statistics, so no two blocks write the same row: bit-identical for
// any block count), and the packed mask by bytes. Run on both, checked against the reference.
// RUN: npugrad-opt %examples/flce_forward.mlir --target npu-a2 --stage tiled | FileCheck %s --check-prefix=NPU
// RUN: npugrad-opt %examples/flce_forward.mlir --target %inputs/avx512bf16.toml --stage tiled | FileCheck %s --check-prefix=HOST
// RUN: npugrad-opt %examples/flce_forward.mlir --target %inputs/amx.toml --stage tiled | FileCheck %s --check-prefix=AMX
// RUN: npugrad-opt %examples/flce_forward.mlir --target npu-a2 --stage run | FileCheck %s --check-prefix=EXEC

// The shapes are static (100 tokens, V = 300, H = 48): choose-tile-sizes takes the tiles the cost
// model predicts fastest, bt = 8 (13 token tiles, one per block for 13 of the 20 cores), all of V
// and H. GEMM 1's operands come gm -> l1 -> l0a/l0b (npu-a2 has no path from gm into L0), W's
// chunk (v x h as stored) transposed by its copy into L0B (h x v); the accumulator starts at zero
// in L0C and stays there across H.
// NPU-DAG:   %gemm1_acc = npu.alloc_local {double_buffer} : memref<8x300xf32, #npu.mem<l0c>>
// NPU-DAG:   %gemm1_rhs_stage = npu.alloc_local {double_buffer} : memref<300x48xbf16, #npu.mem<l1>>
// NPU-DAG:   %gemm1_rhs = npu.alloc_local {double_buffer} : memref<48x300xbf16, #npu.mem<l0b>>
// NPU-DAG:   %gemm1_lhs_stage = npu.alloc_local {double_buffer} : memref<8x48xbf16, #npu.mem<l1>>
// NPU-DAG:   %gemm1_lhs = npu.alloc_local {double_buffer} : memref<8x48xbf16, #npu.mem<l0a>>
// NPU-DAG:   %logits = npu.alloc_local {double_buffer} : memref<8x300xf32, #npu.mem<ub>>
// NPU-DAG:   %[[BID:.*]] = npu.block_idx
// NPU-DAG:   %[[NBLK:.*]] = npu.block_dim
// The mask bytes, a contiguous range per block.
// NPU:       %[[LO:.*]] = arith.muli %[[BID]], %{{.*}} : index
// NPU:       scf.for %{{.*}} = %[[LO]] to %{{.*}} step
// NPU:       } {train.role = #train.role<target_masks>}
// NPU:       } {train.role = #train.role<statistics_init>}
// Vocabulary tiles outer; each block walks its own token tiles inside.
// NPU:       scf.for
// NPU-NOT:     weight_pack
// NPU:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// NPU:           linalg.fill ins(%{{.*}} : f32) outs(%{{.*}} : memref<?x?xf32, strided<[300, 1]>, #npu.mem<l0c>>)
// NPU:           npu.copy %{{.*}}, %{{.*}} : memref<?x?xbf16, strided<[48, 1], offset: ?>>, memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l1>>
// NPU:           npu.copy %{{.*}}, %{{.*}} : memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l1>>, memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l0a>>
// NPU:           npu.copy %{{.*}}, %{{.*}} : memref<?x?xbf16, strided<[48, 1], offset: ?>>, memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l1>>
// NPU:           npu.copy %{{.*}}, %{{.*}} {transpose} : memref<?x?xbf16, strided<[48, 1]>, #npu.mem<l1>>, memref<?x?xbf16, strided<[300, 1]>, #npu.mem<l0b>>
// NPU:           linalg.generic {{.*}} ins({{.*}}#npu.mem<l0a>>, {{.*}}#npu.mem<l0b>>) outs({{.*}}#npu.mem<l0c>>)
// NPU:           npu.copy %{{.*}}, %{{.*}} : memref<?x?xf32, strided<[300, 1]>, #npu.mem<l0c>>, memref<?x?xf32, strided<[300, 1], offset: ?>, #npu.mem<ub>>
// NPU:           math.exp
// NPU:         } {train.role = #train.role<token_loop>}
// NPU:       } {train.fused = #train.fused<"train.fused_linear_online_max_sum", #train.tiles<bt = 8, v = 300, h = 48>>}
// NPU:       } {train.role = #train.role<statistics_final>}

// A CPU (Inputs/avx512bf16.toml, whatever machine runs the test: the host's own caches and
// instructions would vary) has one level the nest's tiles go to: the same nest with its own tiles.
// Block b takes the rows [b·BT/P, (b+1)·BT/P): its statistics, and its token tiles from its first
// row, the last one cut at its last row.
// HOST:      %[[BID:.*]] = npu.block_idx
// HOST-NEXT: %[[NBLK:.*]] = npu.block_dim
// HOST:      %[[FIRST:.*]] = arith.muli %[[BID]], %[[BT:.*]] : index
// HOST-NEXT: %rows_lo = arith.divui %[[FIRST]], %[[NBLK]] : index
// HOST-NEXT: %[[NEXT:.*]] = arith.addi %[[BID]], %{{.*}} : index
// HOST-NEXT: %[[END:.*]] = arith.muli %[[NEXT]], %[[BT]] : index
// HOST-NEXT: %rows_hi = arith.divui %[[END]], %[[NBLK]] : index
// HOST:      npu.alloc_local : memref<{{.*}}xf32, #npu.mem<l2>>
// HOST:      scf.for %{{.*}} = %rows_lo to %rows_hi step
// HOST:      } {train.role = #train.role<statistics_init>}
// HOST:      scf.for %[[T0:.*]] = %rows_lo to %rows_hi step %[[TB:.*]] {
// HOST-NEXT:   %[[LEFT:.*]] = arith.subi %rows_hi, %[[T0]] : index
// HOST-NEXT:   %{{.*}} = arith.minsi %[[TB]], %[[LEFT]] : index
// HOST:      } {train.role = #train.role<token_loop>}
// HOST:      } {train.fused = #train.fused<"train.fused_linear_online_max_sum", #train.tiles<
// HOST:      scf.for %{{.*}} = %rows_lo to %rows_hi step
// HOST:      } {train.role = #train.role<statistics_final>}

// On a CPU whose bfloat16 GEMMs run whole 32-row blocks on AMX tiles (Inputs/amx.toml) and the rows
// after them on vdpbf16ps, the two sum in other orders: every block but the last starts and ends at
// a multiple of 32 rows, so that each row takes the same path on any number of blocks.
// AMX:      %[[BID:.*]] = npu.block_idx
// AMX-NEXT: %[[NBLK:.*]] = npu.block_dim
// AMX:      %[[FIRST:.*]] = arith.muli %[[BID]], %[[BT:.*]] : index
// AMX-NEXT: %[[EVEN:.*]] = arith.divui %[[FIRST]], %[[NBLK]] : index
// AMX-NEXT: %[[BLOCKS:.*]] = arith.divui %[[EVEN]], %[[C32:.*]] : index
// AMX-NEXT: %rows_lo = arith.muli %[[BLOCKS]], %[[C32]] : index
// AMX-NEXT: %[[NEXT:.*]] = arith.addi %[[BID]], %{{.*}} : index
// AMX-NEXT: %[[END:.*]] = arith.muli %[[NEXT]], %[[BT]] : index
// AMX-NEXT: %[[EVEN_END:.*]] = arith.divui %[[END]], %[[NBLK]] : index
// AMX-NEXT: %[[BLOCKS_END:.*]] = arith.divui %[[EVEN_END]], %[[C32]] : index
// AMX-NEXT: %[[ALIGNED_END:.*]] = arith.muli %[[BLOCKS_END]], %[[C32]] : index
// AMX-NEXT: %[[IS_LAST:.*]] = arith.cmpi eq, %[[NEXT]], %[[NBLK]] : index
// AMX-NEXT: %rows_hi = arith.select %[[IS_LAST]], %[[BT]], %[[ALIGNED_END]] : index
// AMX:      scf.for %[[T0:.*]] = %rows_lo to %rows_hi step %[[TB:.*]] {

// EXEC: logits_max_local_out {{.*}} ok
// EXEC: sum_exp_logits_local_out {{.*}} ok
// EXEC: predicted_logits_local_out {{.*}} ok
// EXEC: target_mask_out {{.*}} ok
// EXEC: masked_target_out {{.*}} ok
