// convert-train-to-loops on binary_cross_entropy_grad: one loop nest, float32 arithmetic,
// the clamp max(x(1-x), 1e-12), one rounding to the stored type.
// RUN: npugrad-opt %s --stage loops --no-distribute | FileCheck %s
// RUN: npugrad-opt %s -p convert-train-to-loops | FileCheck %s

// CHECK-LABEL: func.func @bce_mean_f16
// CHECK-NOT:     grad.
// Constants are hoisted above the emitted code.
// CHECK-DAG:     %[[EPS:.*]] = arith.constant 1.000000e-12 : f32
// CHECK-DAG:     %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK:         %[[D:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<1xf16>
// CHECK:         %[[D32:.*]] = arith.extf %[[D]] : f16 to f32
// CHECK:         %[[U:.*]] = arith.divf %[[D32]], %{{.*}} : f32
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:             %[[X:.*]] = arith.extf %{{.*}} : f16 to f32
// CHECK:             %[[OMX:.*]] = arith.subf %[[ONE]], %[[X]] : f32
// CHECK:             %[[XX:.*]] = arith.mulf %[[X]], %[[OMX]] : f32
// CHECK:             %[[DEN:.*]] = arith.maximumf %[[XX]], %[[EPS]] : f32
// CHECK:             %[[NUM:.*]] = arith.mulf %[[U]], %{{.*}} : f32
// CHECK:             %[[DX:.*]] = arith.divf %[[NUM]], %[[DEN]] : f32
// CHECK:             %[[R:.*]] = arith.truncf %[[DX]] : f32 to f16
// CHECK:             memref.store %[[R]], %{{.*}}[%[[I]], %[[J]]] : memref<?x7xf16>
func.func @bce_mean_f16(%x: memref<?x7xf16>, %y: memref<?x7xf16>, %d: memref<1xf16>, %dx: memref<?x7xf16>) {
  train.binary_cross_entropy_grad input_x(%x : memref<?x7xf16>) input_y(%y : memref<?x7xf16>)
      dloss(%d : memref<1xf16>) -> dx(%dx : memref<?x7xf16>)
  func.return
}

// Reduction none reads dloss element by element; the weight multiplies last.
// CHECK-LABEL: func.func @bce_none_weighted
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           %[[U:.*]] = memref.load %{{.*}}[%[[I]]] : memref<5xf32>
// CHECK:           %[[Q:.*]] = arith.divf
// CHECK:           %[[W:.*]] = memref.load %{{.*}}[%[[I]]] : memref<5xf32>
// CHECK:           %[[P:.*]] = arith.mulf %[[Q]], %[[W]] : f32
// CHECK:           memref.store %[[P]]
func.func @bce_none_weighted(%x: memref<5xf32>, %y: memref<5xf32>, %d: memref<5xf32>, %w: memref<5xf32>, %dx: memref<5xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<5xf32>) input_y(%y : memref<5xf32>)
      dloss(%d : memref<5xf32>) weight(%w : memref<5xf32>) -> dx(%dx : memref<5xf32>) {reduction = 0 : i64}
  func.return
}
