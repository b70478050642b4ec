// Zero fills of at least 8 MiB stream past the caches: aligned 64-byte non-temporal stores
// (no read of each line before it is overwritten), then a store fence (sfence: seen by every core
// before any later store); smaller ones stay a memset.
// RUN: npugrad-opt %s --stage asm --cpu %inputs/avx512.toml | FileCheck %s
// RUN: npugrad-opt %s --stage loops --no-distribute | FileCheck %s --check-prefix=LOOPS

// CHECK-LABEL: {{^}}nll:
// CHECK-DAG: vmovntps{{.*}}%zmm{{.*}}(%
// CHECK-DAG: sfence
// CHECK-DAG: memset

// LOOPS-LABEL: func.func @nll
// LOOPS:         %[[FLAT:.*]] = memref.collapse_shape %out
// LOOPS:         %[[N:.*]] = memref.dim %[[FLAT]]
// LOOPS:         %[[LARGE:.*]] = arith.cmpi uge, %[[N]], %{{.*}} : index
// LOOPS:         scf.if %[[LARGE]] {
// LOOPS:           "memref.extract_aligned_pointer_as_index"(%[[FLAT]])
// LOOPS:           vector.store %{{.*}}, %[[FLAT]][%{{.*}}] {alignment = 64 : i64, nontemporal = true} : memref<?xf32>, vector<16xf32>
// LOOPS:           llvm.call_intrinsic "llvm.x86.sse.sfence"() : () -> ()
// LOOPS:         } else {
// LOOPS:           scf.for
// LOOPS:             memref.store %{{.*}}, %[[FLAT]]
func.func @nll(%g: memref<f32>, %self: memref<?x?xf32>, %t: memref<?xi64>, %w: memref<?xf32>, %tw: memref<1xf32>,
               %out: memref<?x?xf32>) {
  train.nll_loss_backward grad_output(%g : memref<f32>) self(%self : memref<?x?xf32>) target(%t : memref<?xi64>)
      weight(%w : memref<?xf32>) total_weight(%tw : memref<1xf32>) -> out(%out : memref<?x?xf32>) {reduction = 1 : i64}
  func.return
}
