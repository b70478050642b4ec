// vectorize-elementwise-loops: an innermost elementwise scf.for runs 16 float32 lanes per step
// (512-bit vectors, Inputs/zmm.toml), then the original scalar loop runs the iterations left.
// streaming=false: the loops as they run through the caches, however much they store
// (vectorize-elementwise-loops-stream.mlir checks the loops that write past them).
// RUN: npugrad-opt %s -p 'vectorize-elementwise-loops{target="%inputs/avx512.toml" streaming=false}' | FileCheck %s

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

// Reductions: a carried f32 that each iteration folds one value into with arith.addf or
// arith.maximumf (the online softmax's row max and sum of exponentials). The vector loop carries
// 16 partial results from the op's identity (-0.0, -inf); they are then folded into the loop's
// initial value lane 0 first, lane 15 last, and the scalar loop goes on from there: a fixed
// order for any thread count (a sum's association differs from the scalar loop's; a max's
// result does not).
// CHECK-LABEL: func.func @row_max_and_sum
// CHECK:         %[[NEGINF:.*]] = arith.constant dense<0xff800000> : vector<16xf32>
// CHECK:         %[[MAXV:.*]] = scf.for %{{.*}} = %{{.*}} to %[[MAIN:.*]] step %{{.*}} iter_args(%[[ACC:.*]] = %[[NEGINF]]) -> (vector<16xf32>) {
// CHECK-NEXT:      %[[V:.*]] = vector.load %x[%{{.*}}] : memref<?xf32>, vector<16xf32>
// CHECK-NEXT:      %[[M:.*]] = arith.maximumf %[[V]], %[[ACC]] : vector<16xf32>
// CHECK-NEXT:      scf.yield %[[M]] : vector<16xf32>
// CHECK:         %[[L0:.*]] = vector.extract %[[MAXV]][0] : f32 from vector<16xf32>
// CHECK-NEXT:    %[[F0:.*]] = arith.maximumf %{{.*}}, %[[L0]] : f32
// CHECK-COUNT-15: vector.extract %[[MAXV]]
// CHECK:         %[[MAX:.*]] = scf.for %{{.*}} = %[[MAIN]] to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %{{.*}}) -> (f32) {
// CHECK:         %[[NEG0:.*]] = arith.constant dense<-0.000000e+00> : vector<16xf32>
// CHECK-NEXT:    %[[NEG0B:.*]] = arith.constant dense<-0.000000e+00> : vector<16xf32>
// CHECK:         %{{.*}}, %{{.*}} = scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%{{.*}} = %[[NEG0]], %{{.*}} = %[[NEG0B]]) -> (vector<16xf32>, vector<16xf32>) {
// CHECK:           math.exp %{{.*}} : vector<16xf32>
// CHECK:         } {train.vectorized}
// CHECK:         scf.for %{{.*}} iter_args(%{{.*}} = %{{.*}}, %{{.*}} = %{{.*}}) -> (f32, f32) {
// CHECK:           math.exp %{{.*}} : f32
func.func @row_max_and_sum(%x: memref<?xf32>, %out: memref<3xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %ninf = arith.constant 0xFF800000 : f32
  %zero = arith.constant 0.0 : f32
  %n = memref.dim %x, %c0 : memref<?xf32>
  %max = scf.for %i = %c0 to %n step %c1 iter_args(%m = %ninf) -> (f32) {
    %v = memref.load %x[%i] : memref<?xf32>
    %m1 = arith.maximumf %v, %m : f32
    scf.yield %m1 : f32
  }
  %s:2 = scf.for %i = %c0 to %n step %c1 iter_args(%a = %zero, %b = %zero) -> (f32, f32) {
    %v = memref.load %x[%i] : memref<?xf32>
    %d = arith.subf %v, %max : f32
    %e = math.exp %d : f32
    %a1 = arith.addf %a, %e : f32
    %b1 = arith.addf %b, %v : f32
    scf.yield %a1, %b1 : f32, f32
  }
  memref.store %max, %out[%c0] : memref<3xf32>
  memref.store %s#0, %out[%c1] : memref<3xf32>
  memref.store %s#1, %out[%c2] : memref<3xf32>
  func.return
}

// Left scalar: a partial result also used otherwise in the loop (a running sum stored each step),
// a carried value also read by another op,
// a product (not a reduction this pass folds), a carried value folding in a loop-invariant value.
// CHECK-LABEL: func.func @not_reductions
// CHECK-NOT:     vector.
// CHECK-NOT:     train.vectorized
// CHECK:         func.return
func.func @not_reductions(%x: memref<?xf32>, %y: memref<?xf32>, %out: memref<3xf32>, %u: f32) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %zero = arith.constant 0.0 : f32
  %one = arith.constant 1.0 : f32
  %n = memref.dim %x, %c0 : memref<?xf32>
  %run = scf.for %i = %c0 to %n step %c1 iter_args(%a = %zero) -> (f32) {
    %v = memref.load %x[%i] : memref<?xf32>
    %a1 = arith.addf %a, %v : f32
    memref.store %a1, %y[%i] : memref<?xf32>
    scf.yield %a1 : f32
  }
  %prod = scf.for %i = %c0 to %n step %c1 iter_args(%p = %one) -> (f32) {
    %v = memref.load %x[%i] : memref<?xf32>
    %p1 = arith.mulf %p, %v : f32
    scf.yield %p1 : f32
  }
  %inv = scf.for %i = %c0 to %n step %c1 iter_args(%a = %zero) -> (f32) {
    %v = memref.load %x[%i] : memref<?xf32>
    %a1 = arith.addf %a, %u : f32
    scf.yield %a1 : f32
  }
  %seen = scf.for %i = %c0 to %n step %c1 iter_args(%a = %zero) -> (f32) {
    %v = memref.load %x[%i] : memref<?xf32>
    %w = arith.mulf %a, %v : f32
    memref.store %w, %y[%i] : memref<?xf32>
    %a1 = arith.addf %a, %v : f32
    scf.yield %a1 : f32
  }
  memref.store %seen, %out[%c0] : memref<3xf32>
  memref.store %run, %out[%c0] : memref<3xf32>
  memref.store %prod, %out[%c1] : memref<3xf32>
  memref.store %inv, %out[%c2] : memref<3xf32>
  func.return
}

// An unroll annotation (#llvm.loop_annotation) is on both loops the scalar loop becomes.
// CHECK-LABEL: func.func @annotated
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           vector.store
// CHECK-NEXT:    } {train.vectorized, loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}
// CHECK-NEXT:    scf.for
// CHECK:           memref.store
// CHECK-NEXT:    } {loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}
func.func @annotated(%x: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %x[%i] : memref<?xf32>
    %w = arith.addf %v, %v : f32
    memref.store %w, %x[%i] : memref<?xf32>
  } {loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}
  func.return
}
