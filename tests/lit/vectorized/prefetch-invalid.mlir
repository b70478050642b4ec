// memref.prefetch's verifier (npugrad/dialect/upstream.py): an index per dimension, a locality
// hint from 0 to 3, each rejected at the op's line.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics

func.func @too_few_indices(%c: memref<?x64xf32>, %i: index) {
  // expected-error@+1 {{'memref.prefetch' op expects 2 indices into memref<?x64xf32>, got 1}}
  memref.prefetch %c[%i], read, locality<3>, data : memref<?x64xf32>
  func.return
}

// -----
func.func @locality_out_of_range(%c: memref<8xf32>, %i: index) {
  // expected-error@+1 {{'memref.prefetch' op locality hint must be 0 to 3, got 4}}
  memref.prefetch %c[%i], read, locality<4>, data : memref<8xf32>
  func.return
}
