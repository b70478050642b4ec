// vectorize-elementwise-loops: an innermost elementwise scf.for runs 16 float32 lanes per step
// (512-bit vectors, Inputs/zmm.toml), then the original scalar loop runs the iterations left.
// RUN: npugrad-opt %s -p 'vectorize-elementwise-loops{target="%inputs/avx512.toml"}' | FileCheck %s

// CHECK-LABEL: func.func @scale
// CHECK-DAG:     %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:     %[[C1:.*]] = arith.constant 1 : index
// CHECK:         %[[N:.*]] = memref.dim %x, %[[C0]] : memref<?xf32>
// CHECK-NEXT:    %[[LANES:.*]] = arith.constant 16 : index
// CHECK:         %[[TRIPS:.*]] = arith.maxsi %{{.*}}, %{{.*}} : index
// CHECK-NEXT:    %[[LEFT:.*]] = arith.remui %[[TRIPS]], %[[LANES]] : index
// CHECK-NEXT:    %[[MAIN:.*]] = arith.subi %[[N]], %[[LEFT]] : index
// The constant is broadcast once, before the loop.
// CHECK-NEXT:    %[[HALF:.*]] = vector.broadcast %{{.*}} : f32 to vector<16xf32>
// CHECK-NEXT:    scf.for %[[I:.*]] = %[[C0]] to %[[MAIN]] step %[[LANES]] {
// CHECK-NEXT:      %[[X:.*]] = vector.load %x[%[[I]]] : memref<?xf32>, vector<16xf32>
// The uniform load stays scalar (no %i in its indices) and is broadcast where it is used.
// CHECK-NEXT:      %[[S:.*]] = memref.load %s[%[[C0]]] : memref<1xf32>
// CHECK-NEXT:      %[[SV:.*]] = vector.broadcast %[[S]] : f32 to vector<16xf32>
// CHECK-NEXT:      %[[P:.*]] = arith.mulf %[[X]], %[[SV]] : vector<16xf32>
// CHECK-NEXT:      %[[Q:.*]] = arith.mulf %[[P]], %[[HALF]] : vector<16xf32>
// CHECK-NEXT:      %[[R:.*]] = arith.maximumf %[[Q]], %[[X]] : vector<16xf32>
// CHECK-NEXT:      %[[H:.*]] = arith.truncf %[[R]] : vector<16xf32> to vector<16xbf16>
// CHECK-NEXT:      vector.store %[[H]], %y[%[[I]]] : memref<?xbf16>, vector<16xbf16>
// CHECK-NEXT:    } {train.vectorized}
// The remainder: the original scalar loop, from where the vector loop stopped.
// CHECK-NEXT:    scf.for %[[J:.*]] = %[[MAIN]] to %[[N]] step %[[C1]] {
// CHECK-NEXT:      memref.load %x[%[[J]]] : memref<?xf32>
// CHECK:           memref.store %{{.*}}, %y[%[[J]]] : memref<?xbf16>
// CHECK-NEXT:    }
func.func @scale(%x: memref<?xf32>, %s: memref<1xf32>, %y: memref<?xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %half = arith.constant 0.5 : f32
  %n = memref.dim %x, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %x[%i] : memref<?xf32>
    %scale = memref.load %s[%c0] : memref<1xf32>
    %p = arith.mulf %v, %scale : f32
    %q = arith.mulf %p, %half : f32
    %r = arith.maximumf %q, %v : f32
    %h = arith.truncf %r : f32 to bf16
    memref.store %h, %y[%i] : memref<?xbf16>
  }
  func.return
}

// In place, rows of a 2-D memref: the row index is loop-invariant in the inner loop.
// CHECK-LABEL: func.func @in_place
// CHECK:         scf.for %[[R:.*]] = {{.*}} {
// CHECK:           scf.for %[[I:.*]] = {{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[A:.*]] = vector.load %a[%[[R]], %[[I]]] : memref<?x?xi32>, vector<16xi32>
// CHECK-NEXT:        %[[B:.*]] = arith.addi %[[A]], %[[A]] : vector<16xi32>
// CHECK-NEXT:        vector.store %[[B]], %a[%[[R]], %[[I]]] : memref<?x?xi32>, vector<16xi32>
// CHECK-NEXT:      } {train.vectorized}
// CHECK-NEXT:      scf.for
func.func @in_place(%a: memref<?x?xi32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?x?xi32>
  scf.for %r = %c0 to %n step %c1 {
    scf.for %i = %c0 to %n step %c1 {
      %v = memref.load %a[%r, %i] : memref<?x?xi32>
      %w = arith.addi %v, %v : i32
      memref.store %w, %a[%r, %i] : memref<?x?xi32>
    }
  }
  func.return
}

// Left scalar: a transposed store; %i in arithmetic; a stored memref also read at another index
// (row 0 changes while other rows read it); a comparison of lanes (xDSL 0.74's arith.cmpf has a
// scalar i1 result only).
// CHECK-LABEL: func.func @not_elementwise
// CHECK-NOT:     vector.
// CHECK-NOT:     train.vectorized
// CHECK:         func.return
func.func @not_elementwise(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %a, %c0 : memref<?x?xf32>
  scf.for %r = %c0 to %n step %c1 {
    scf.for %i = %c0 to %n step %c1 {
      %v = memref.load %a[%r, %i] : memref<?x?xf32>
      memref.store %v, %b[%i, %r] : memref<?x?xf32>
    }
    scf.for %i = %c0 to %n step %c1 {
      %j = arith.addi %i, %c1 : index
      %v = memref.load %c[%j] : memref<?xf32>
      memref.store %v, %c[%i] : memref<?xf32>
    }
    scf.for %i = %c0 to %n step %c1 {
      %v = memref.load %a[%r, %i] : memref<?x?xf32>
      %u = memref.load %a[%c0, %i] : memref<?x?xf32>
      %w = arith.addf %v, %u : f32
      memref.store %w, %a[%r, %i] : memref<?x?xf32>
    }
    scf.for %i = %c0 to %n step %c1 {
      %v = memref.load %a[%r, %i] : memref<?x?xf32>
      %pos = arith.cmpf ogt, %v, %v : f32
      %w = arith.select %pos, %v, %v : f32
      memref.store %w, %b[%r, %i] : memref<?x?xf32>
    }
  }
  func.return
}
