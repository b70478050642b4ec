// read-weight-in-place: GEMM 1 of a fused linear nest reads W's vocabulary tile as it is stored
// (v x h, the map (t, h, v) -> (v, h)) instead of the copy the fuse pass made transposed with
// scalar loops (#train.role<weight_pack>); the copy and its buffer go. The pipeline runs it on
// one core (--no-distribute), where neither distribute-over-cores nor tile-for-target does it.
// RUN: npugrad-opt %s -p 'fuse-linear-online-max-sum{tile_bt=32 tile_v=64}' | npugrad-opt -p read-weight-in-place | FileCheck %s
// RUN: npugrad-opt %s -p 'fuse-linear-cross-entropy-grad{tile_bt=32 tile_v=64},read-weight-in-place' | FileCheck %s --check-prefix=GRAD
// RUN: npugrad-opt %s --stage tiled --no-distribute | FileCheck %s --check-prefix=ONE
// Without it the copy is there:
// RUN: npugrad-opt %s -p 'fuse-linear-online-max-sum{tile_bt=32 tile_v=64}' | FileCheck %s --check-prefix=COPY
// GEMM 1 already a micro-kernel (vectorize-contractions first) reads the copy: the copy stays.
// Erased, GEMM 1 read a buffer nothing wrote (NaN logits at --stage run).
// RUN: npugrad-opt %s -p 'fuse-linear-online-max-sum{tile_bt=32 tile_v=64},vectorize-contractions{target="%inputs/avx2.toml"},read-weight-in-place' | FileCheck %s --check-prefix=KEPT
// RUN: npugrad-opt %s -p 'fuse-linear-online-max-sum{tile_bt=32 tile_v=64},vectorize-contractions' --stage run --entry forward | FileCheck %s --check-prefix=EXEC

// CHECK-LABEL: func.func @forward(
// CHECK-NOT:     weight_tile_packed
// CHECK-NOT:     weight_pack
// CHECK:         %[[WT:.*]] = memref.subview %w[%{{.*}}, 0] [%{{.*}}, 48] [1, 1] : memref<300x48xf32> to memref<?x48xf32, strided<[48, 1], offset: ?>>
// CHECK:         linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d2)>]
// CHECK-SAME:        doc = "GEMM 1: logits tile Z = X_t * W_v^T"
// CHECK-SAME:        ins(%{{.*}}, %[[WT]] : memref<?x48xf32, strided<[48, 1], offset: ?>>, memref<?x48xf32, strided<[48, 1], offset: ?>>)
// CHECK-SAME:        {train.contraction = #train.contraction<logits, dims = [bt, h, v]>}

// COPY-LABEL: func.func @forward(
// COPY:         %weight_tile_packed = memref.alloc()
// COPY:         } {train.role = #train.role<weight_pack>}
// COPY:         linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>, affine_map<(d0, d1, d2) -> (d0, d2)>]

// KEPT-LABEL: func.func @forward(
// KEPT:         %weight_tile_packed = memref.alloc()
// KEPT:         } {train.role = #train.role<weight_pack>}
// KEPT:         memref.dealloc %weight_tile_packed

// EXEC: logits_max_local_out {{.*}} ok
// EXEC: sum_exp_logits_local_out {{.*}} ok

// ONE-LABEL: func.func @forward(
// ONE-NOT:     weight_pack
// ONE-NOT:     npu.block_idx
// ONE:         affine_map<(d0, d1, d2) -> (d2, d1)>
// ONE-SAME:        doc = "GEMM 1: logits tile Z = X_t * W_v^T"
func.func @forward(%x: memref<100x48xf32>, %w: memref<300x48xf32>, %t: memref<100xi64>,
                   %m: memref<100xf32>, %s: memref<100xf32>, %p: memref<100xf32>,
                   %mask: memref<13xui8>, %mt: memref<100xi64>) {
  train.fused_linear_online_max_sum input(%x : memref<100x48xf32>) weight(%w : memref<300x48xf32>)
      target(%t : memref<100xi64>) -> logits_max_local_out(%m : memref<100xf32>)
      sum_exp_logits_local_out(%s : memref<100xf32>) predicted_logits_local_out(%p : memref<100xf32>)
      target_mask_out(%mask : memref<13xui8>) masked_target_out(%mt : memref<100xi64>)
      {vocab_start_index = 0 : i64, vocab_end_index = 300 : i64}
  func.return
}

// The gradient's nest (memory-saving mode: it recomputes the logits): the same.
// GRAD-LABEL: func.func @grad(
// GRAD-NOT:     weight_pack
// GRAD:         linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d2)>]
// GRAD-SAME:        doc = "GEMM 1: logits tile Z = X_t * W_v^T"
// GRAD-SAME:        ins(%{{.*}}, %{{.*}} : memref<?x48xf32, strided<[48, 1], offset: ?>>, memref<?x48xf32, strided<[48, 1], offset: ?>>)
func.func @grad(%g: memref<?xf32>, %x: memref<?x48xf32>, %w: memref<?x48xf32>, %mask: memref<?xi1>,
                %t: memref<?xi32>, %lm: memref<?xf32>, %se: memref<?xf32>,
                %gx: memref<?x48xf32>, %gw: memref<?x48xf32>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<?xf32>) input(%x : memref<?x48xf32>)
      weight(%w : memref<?x48xf32>) target_mask(%mask : memref<?xi1>) masked_target(%t : memref<?xi32>)
      logits_max(%lm : memref<?xf32>) sum_exp_logits(%se : memref<?xf32>)
      -> input_grad_out(%gx : memref<?x48xf32>) weight_grad_out(%gw : memref<?x48xf32>)
  func.return
}
