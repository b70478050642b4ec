// vectorize-elementwise-loops on a target whose global memory gives a latency
// (Inputs/avx512_dram_latency.toml): each vector load from global memory (a function argument,
// or a view of one) is preceded by a prefetch of its row's element the target's
// stream_prefetch_bytes ahead (2432 bytes: 608 float32, 1216 bfloat16), clamped to the loop's
// last element, which the loop reads itself: never out of bounds. A buffer the function
// allocates (a tile meant to stay in a cache level) gets none, nor does a uniform load. Loads of
// one element size share the clamped index. On a target without the latency
// (vectorize-elementwise-loops.mlir) no prefetch is emitted. streaming=false: the loop as it runs
// through the caches (vectorize-elementwise-loops-stream.mlir: its prefetches where it streams).
// RUN: npugrad-opt %s -p 'vectorize-elementwise-loops{target="%inputs/avx512_dram_latency.toml" streaming=false}' | FileCheck %s
// RUN: npugrad-opt %s -p 'vectorize-elementwise-loops{target="%inputs/avx512.toml" streaming=false}' | FileCheck %s --check-prefix=NONE

// CHECK-LABEL: func.func @stream
// CHECK:         %[[LEFT:.*]] = arith.remui
// CHECK-NEXT:    arith.subi %n, %[[LEFT]] : index
// CHECK-NEXT:    %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NEXT:    %[[LAST:.*]] = arith.subi %n, %[[ONE]] : index
// CHECK-NEXT:    %[[F32_AHEAD:.*]] = arith.constant 608 : index
// CHECK-NEXT:    %[[BF16_AHEAD:.*]] = arith.constant 1216 : index
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      %[[A:.*]] = arith.addi %[[I]], %[[F32_AHEAD]] : index
// CHECK-NEXT:      %[[AT:.*]] = arith.minsi %[[A]], %[[LAST]] : index
// CHECK-NEXT:      memref.prefetch %x[%[[AT]]], read, locality<3>, data : memref<?xf32>
// CHECK-NEXT:      vector.load %x[%[[I]]] : memref<?xf32>, vector<16xf32>
// The view of an argument streams too; the same element size, the same index.
// CHECK-NEXT:      memref.prefetch %[[VIEW:.*]][%[[AT]]], read, locality<3>, data
// CHECK-NEXT:      vector.load %[[VIEW]][%[[I]]]
// A bfloat16 stream: the same bytes ahead, twice the elements.
// CHECK-NEXT:      %[[B:.*]] = arith.addi %[[I]], %[[BF16_AHEAD]] : index
// CHECK-NEXT:      %[[BT:.*]] = arith.minsi %[[B]], %[[LAST]] : index
// CHECK-NEXT:      memref.prefetch %h[%[[BT]]], read, locality<3>, data : memref<?xbf16>
// CHECK-NEXT:      vector.load %h[%[[I]]] : memref<?xbf16>, vector<16xbf16>
// CHECK-NEXT:      arith.extf
// The allocated tile and the uniform load: no prefetch.
// CHECK-NEXT:      vector.load %tile[%[[I]]]
// CHECK-NOT:       memref.prefetch
// CHECK:         } {train.vectorized}
// The scalar remainder loop is left as it was.
// CHECK-NOT:     memref.prefetch
// CHECK:         func.return

// NONE-LABEL: func.func @stream
// NONE-NOT:      memref.prefetch
// NONE:          func.return
func.func @stream(%x: memref<?xf32>, %xs: memref<?x?xf32>, %h: memref<?xbf16>, %s: memref<1xf32>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  %row = memref.subview %xs[%c1, 0] [1, %n] [1, 1] : memref<?x?xf32> to memref<?xf32, strided<[1], offset: ?>>
  %tile = memref.alloc(%n) : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %x[%i] : memref<?xf32>
    %b = memref.load %row[%i] : memref<?xf32, strided<[1], offset: ?>>
    %c = memref.load %h[%i] : memref<?xbf16>
    %cw = arith.extf %c : bf16 to f32
    %t = memref.load %tile[%i] : memref<?xf32>
    %k = memref.load %s[%c0] : memref<1xf32>
    %p = arith.mulf %a, %b : f32
    %q = arith.addf %p, %cw : f32
    %r = arith.addf %q, %t : f32
    %z = arith.mulf %r, %k : f32
    memref.store %z, %y[%i] : memref<?xf32>
  }
  memref.dealloc %tile : memref<?xf32>
  func.return
}
