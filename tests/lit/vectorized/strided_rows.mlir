// Operands whose rows are contiguous but a pitch apart that is not their width (a view of some
// rows or columns of a larger array: what the runtime specialises a NumPy view with unit last
// stride to, strided<[?, 1]>) get the same register-blocked micro-kernels as contiguous ones: no
// contraction is left as a linalg.generic. With every stride dynamic (strided<[?, ?]>: the last
// stride unknown) the contractions become scalar loops (arith.mulf, no vector.fma).
// RUN: npugrad-opt %s --stage vectorized --cpu %inputs/avx2.toml | FileCheck %s
// RUN: sed 's/strided<\[?, 1\]/strided<[?, ?]/g' %s | npugrad-opt --stage vectorized --cpu %inputs/avx2.toml | FileCheck %s --check-prefix=ANY

// CHECK-LABEL: func.func @grad_rows
// CHECK-NOT:     linalg.generic
// CHECK:         vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK-NOT:     linalg.generic
// CHECK-LABEL: func.func @forward_rows
// CHECK-NOT:     linalg.generic
// CHECK:         vector.fma %{{.*}}, %{{.*}}, %{{.*}} : vector<8xf32>
// CHECK-NOT:     linalg.generic
// CHECK:         func.return

// ANY-LABEL: func.func @grad_rows
// ANY-NOT:     vector.fma
// ANY:         arith.mulf
// ANY-NOT:     vector.fma
// ANY-LABEL: func.func @forward_rows
// ANY-NOT:     vector.fma
// ANY:         arith.mulf
// ANY-NOT:     vector.fma
func.func @grad_rows(%grad: memref<?xf32>, %x: memref<?x?xf32, strided<[?, 1], offset: ?>>,
                     %w: memref<?x?xf32, strided<[?, 1], offset: ?>>, %mask: memref<?xui8>, %target: memref<?xi64>,
                     %max: memref<?xf32>, %sum: memref<?xf32>,
                     %dx: memref<?x?xf32, strided<[?, 1], offset: ?>>, %dw: memref<?x?xf32, strided<[?, 1], offset: ?>>) {
  train.fused_linear_cross_entropy_loss_grad grad(%grad : memref<?xf32>)
      input(%x : memref<?x?xf32, strided<[?, 1], offset: ?>>) weight(%w : memref<?x?xf32, strided<[?, 1], offset: ?>>)
      target_mask(%mask : memref<?xui8>) masked_target(%target : memref<?xi64>)
      logits_max(%max : memref<?xf32>) sum_exp_logits(%sum : memref<?xf32>)
      -> input_grad_out(%dx : memref<?x?xf32, strided<[?, 1], offset: ?>>)
         weight_grad_out(%dw : memref<?x?xf32, strided<[?, 1], offset: ?>>)
  func.return
}

func.func @forward_rows(%x: memref<?x?xf32, strided<[?, 1], offset: ?>>, %w: memref<?x?xf32, strided<[?, 1], offset: ?>>,
                        %t: memref<?xi64>, %m: memref<?xf32>, %s: memref<?xf32>, %p: memref<?xf32>,
                        %mask: memref<?xui8>, %mt: memref<?xi64>) {
  train.fused_linear_online_max_sum input(%x : memref<?x?xf32, strided<[?, 1], offset: ?>>)
      weight(%w : memref<?x?xf32, strided<[?, 1], offset: ?>>) target(%t : memref<?xi64>)
      -> logits_max_local_out(%m : memref<?xf32>) sum_exp_logits_local_out(%s : memref<?xf32>)
      predicted_logits_local_out(%p : memref<?xf32>) target_mask_out(%mask : memref<?xui8>)
      masked_target_out(%mt : memref<?xi64>) {vocab_start_index = 0 : i64, vocab_end_index = 300 : i64}
  func.return
}
