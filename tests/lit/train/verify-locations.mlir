// A verifier error is reported at the offending op's file:line:col (lines of the whole file, also
// in later chunks of a split file), with the line quoted and a caret under the column.
// RUN: not npugrad-opt %s --split-input-file 2>&1 | FileCheck %s

func.func @top_level(%x: memref<4xf32>, %y: memref<4xf32>, %d: memref<1xf32>, %dx: memref<4xf32>) {
  // CHECK: {{^.*}}verify-locations.mlir:[[# @LINE + 3]]:3: error: 'train.binary_cross_entropy_grad' op property 'reduction' must be 0 (none), 1 (mean) or 2 (sum), got 7
  // CHECK-NEXT: {{^}}  train.binary_cross_entropy_grad input_x(%x : memref<4xf32>) input_y(%y : memref<4xf32>){{$}}
  // CHECK-NEXT: {{^}}  ^{{$}}
  train.binary_cross_entropy_grad input_x(%x : memref<4xf32>) input_y(%y : memref<4xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<4xf32>) {reduction = 7 : i64}
  func.return
}

// -----

// Nested in a loop: the op is at fault, not the loop or the function around it.
func.func @in_a_loop(%x: memref<4xf32>, %y: memref<5xf32>, %d: memref<1xf32>, %dx: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %i = %c0 to %c1 step %c1 {
    // CHECK: {{^.*}}verify-locations.mlir:[[# @LINE + 3]]:5: error: 'train.binary_cross_entropy_grad' op operand 'input_y' must have shape (4,) (the shape of 'input_x'), got (5,)
    // CHECK-NEXT: {{^}}    train.binary_cross_entropy_grad
    // CHECK-NEXT: {{^}}    ^{{$}}
    train.binary_cross_entropy_grad input_x(%x : memref<4xf32>) input_y(%y : memref<5xf32>)
        dloss(%d : memref<1xf32>) -> dx(%dx : memref<4xf32>)
  }
  func.return
}

// -----

// The generic form is located the same way.
func.func @generic(%g: memref<4x5xf32>, %i: memref<4xi32>, %out: memref<10x5xf32>) {
  // CHECK: {{^.*}}verify-locations.mlir:[[# @LINE + 2]]:3: error: 'train.embedding_dense_backward' op operand 'out' must have shape (num_weights, D) = (11, 5), got (10, 5)
  // CHECK-NEXT: {{^}}  "train.embedding_dense_backward"
  "train.embedding_dense_backward"(%g, %i, %out) <{num_weights = 11 : i64}>
      : (memref<4x5xf32>, memref<4xi32>, memref<10x5xf32>) -> ()
  func.return
}

// -----

// An explicit loc(...) wins (a front end's source position); its line is not in this file.
func.func @explicit_loc(%go: memref<f32>, %s: memref<6x10xf32>, %t: memref<6xi64>, %w: memref<10xf32>,
    %tw: memref<1xf32>, %out: memref<6x10xf32>) {
  // CHECK: {{^}}model.py:42:7: error: 'train.nll_loss_backward' op property 'reduction' must be 0 (none), 1 (mean) or 2 (sum), got 5
  // CHECK-NOT: train.nll_loss_backward grad_output
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<6x10xf32>) target(%t : memref<6xi64>)
      weight(%w : memref<10xf32>) total_weight(%tw : memref<1xf32>) -> out(%out : memref<6x10xf32>)
      {reduction = 5 : i64} loc("model.py":42:7)
  func.return
}
