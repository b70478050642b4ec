// convert-train-to-loops lowers every train op through its recipe (per-op tests: tests/lit/loops/).
// After it nothing of the train level is left: no train op, and none of the attributes that
// described train ops and their nests (#train.tiles here); the markers later passes and the
// runtime read stay (train.distributed on the function).
// RUN: npugrad-opt %s -p convert-train-to-loops | FileCheck %s

// CHECK-LABEL: func.func @tiles(
// CHECK-SAME:    attributes {train.distributed}
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           scf.for
// CHECK:             arith.maximumf
// CHECK:           }
// CHECK-NEXT:    }
// CHECK-NOT:     grad.
// CHECK:         func.return
func.func @tiles(%x: memref<40xf32>, %y: memref<40xf32>, %d: memref<f32>, %dx: memref<40xf32>) attributes {train.distributed} {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c40 = arith.constant 40 : index
  scf.for %i = %c0 to %c40 step %c4 {
    %xs = memref.subview %x[%i] [4] [1] : memref<40xf32> to memref<4xf32, strided<[1], offset: ?>>
    %ys = memref.subview %y[%i] [4] [1] : memref<40xf32> to memref<4xf32, strided<[1], offset: ?>>
    %dxs = memref.subview %dx[%i] [4] [1] : memref<40xf32> to memref<4xf32, strided<[1], offset: ?>>
    train.binary_cross_entropy_grad input_x(%xs : memref<4xf32, strided<[1], offset: ?>>)
        input_y(%ys : memref<4xf32, strided<[1], offset: ?>>) dloss(%d : memref<f32>)
        -> dx(%dxs : memref<4xf32, strided<[1], offset: ?>>) {reduction = 2 : i64}
  } {train.tiles = #train.tiles<n = 4>}
  func.return
}
