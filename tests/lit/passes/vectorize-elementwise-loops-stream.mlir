// vectorize-elementwise-loops writes an output past the caches where a loop stores at least the
// target's stream_store_bytes of it (Inputs/avx512.toml: its largest level, a 1 MiB L2 per
// core): a loop that stores a memref of global memory (a function argument, or a view of one)
// which it does not read is emitted twice, chosen at run time. Where it stores enough and the
// output's first element can start a line: scalar iterations up to the first element on a
// 64-byte line, the vector loop with that output's stores non-temporal and aligned, the scalar
// rest, then an sfence (the non-temporal stores seen by every core before any later store);
// otherwise the vector loop and the scalar rest as through the caches. Never streamed: a memref
// the loop also reads (in place), a buffer the function allocates, a loop carrying a value, a
// loop whose constant bounds store too little; streaming=false turns it off.
// RUN: npugrad-opt %s -p 'vectorize-elementwise-loops{target="%inputs/avx512.toml"}' | FileCheck %s
// RUN: npugrad-opt %s -p 'vectorize-elementwise-loops{target="%inputs/avx512.toml" streaming=false}' | FileCheck %s --check-prefix=OFF

// CHECK-LABEL: func.func @output
// CHECK:         %[[FOUR:.*]] = arith.constant 4 : index
// CHECK:         %[[LINE:.*]] = arith.constant 64 : index
// CHECK:         %[[THRESHOLD:.*]] = arith.constant 1048576 : index
// CHECK:         %[[TRIPS:.*]] = arith.maxsi
// CHECK-NEXT:    %stored_bytes = arith.muli %[[TRIPS]], %[[FOUR]] : index
// CHECK:         memref.extract_strided_metadata %y
// CHECK:         %[[BASE:.*]] = "memref.extract_aligned_pointer_as_index"(%y)
// CHECK:         %first_byte = arith.addi %[[BASE]], %{{.*}} : index
// CHECK-NEXT:    %[[MISALIGNED:.*]] = arith.remui %first_byte, %[[LINE]] : index
// CHECK-NEXT:    %[[BEFORE:.*]] = arith.subi %[[LINE]], %[[MISALIGNED]] : index
// CHECK-NEXT:    %to_line = arith.remui %[[BEFORE]], %[[LINE]] : index
// CHECK-NEXT:    %[[LARGE:.*]] = arith.cmpi uge, %stored_bytes, %[[THRESHOLD]] : index
// CHECK-NEXT:    %[[PART:.*]] = arith.remui %to_line, %[[FOUR]] : index
// CHECK-NEXT:    %[[WHOLE:.*]] = arith.cmpi eq, %[[PART]], %{{.*}} : index
// CHECK-NEXT:    %streamed = arith.andi %[[LARGE]], %[[WHOLE]] : i1
// CHECK-NEXT:    scf.if %streamed {
// CHECK:           %line_start = arith.addi
// The scalar iterations before y's first line.
// CHECK-NEXT:      scf.for %[[I:.*]] = %{{.*}} to %line_start step %{{.*}} {
// CHECK:             memref.store %{{.*}}, %y[%[[I]]] : memref<?xf32>
// CHECK:           scf.for %[[J:.*]] = %line_start to %[[MAIN:.*]] step %{{.*}} {
// CHECK:             vector.load %x[%[[J]]]
// CHECK:             vector.store %{{.*}}, %y[%[[J]]] {alignment = 64 : i64, nontemporal = true} : memref<?xf32>, vector<16xf32>
// CHECK-NEXT:      } {train.vectorized}
// CHECK-NEXT:      scf.for %[[K:.*]] = %[[MAIN]] to %n step %{{.*}} {
// CHECK:             memref.store %{{.*}}, %y[%[[K]]] : memref<?xf32>
// CHECK:           llvm.call_intrinsic "llvm.x86.sse.sfence"() : () -> ()
// CHECK-NEXT:    } else {
// CHECK:           scf.for
// CHECK:             vector.store %{{.*}}, %y[%{{.*}}] : memref<?xf32>, vector<16xf32>
// CHECK-NEXT:      } {train.vectorized}
// CHECK-NEXT:      scf.for
// CHECK:             memref.store %{{.*}}, %y[%{{.*}}] : memref<?xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return

// OFF-LABEL: func.func @output
// OFF-NOT:       scf.if
// OFF-NOT:       nontemporal
// OFF:           func.return
func.func @output(%x: memref<?xf32>, %s: memref<1xf32>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %x[%i] : memref<?xf32>
    %k = memref.load %s[%c0] : memref<1xf32>
    %z = arith.mulf %a, %k : f32
    memref.store %z, %y[%i] : memref<?xf32>
  }
  func.return
}

// A bfloat16 output: 16 lanes are 32 bytes, each vector aligned to 32 (two per line); the row of
// a 2-D output (its row index defined before the loop) is addressed through its strides.
// CHECK-LABEL: func.func @row_of_bf16
// CHECK:         %[[META:.*]], %[[OFFSET:.*]], %{{.*}}, %{{.*}}, %[[STRIDE:.*]], %{{.*}} = memref.extract_strided_metadata %y
// CHECK-NEXT:    %[[ROW:.*]] = arith.muli %r, %[[STRIDE]] : index
// CHECK:         scf.if %streamed {
// CHECK:           vector.store %{{.*}}, %y[%r, %{{.*}}] {alignment = 32 : i64, nontemporal = true} : memref<?x?xbf16>, vector<16xbf16>
func.func @row_of_bf16(%x: memref<?xf32>, %y: memref<?x?xbf16>, %r: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %x[%i] : memref<?xf32>
    %h = arith.truncf %a : f32 to bf16
    memref.store %h, %y[%r, %i] : memref<?x?xbf16>
  }
  func.return
}

// In place (the output is read too), an allocated buffer, a carried sum: through the caches.
// CHECK-LABEL: func.func @not_streamed
// CHECK-NOT:     scf.if
// CHECK-NOT:     nontemporal
// CHECK:         func.return
func.func @not_streamed(%x: memref<?xf32>, %v: memref<?xf32>, %acc: memref<1xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  %view = memref.subview %v[0] [%n] [1] : memref<?xf32> to memref<?xf32, strided<[1]>>
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %view[%i] : memref<?xf32, strided<[1]>>
    %b = arith.addf %a, %a : f32
    memref.store %b, %v[%i] : memref<?xf32>
  }
  %tile = memref.alloc(%n) : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %x[%i] : memref<?xf32>
    memref.store %a, %tile[%i] : memref<?xf32>
  }
  memref.dealloc %tile : memref<?xf32>
  %zero = arith.constant 0.0 : f32
  %sum = scf.for %i = %c0 to %n step %c1 iter_args(%s = %zero) -> (f32) {
    %a = memref.load %x[%i] : memref<?xf32>
    memref.store %a, %v[%i] : memref<?xf32>
    %t = arith.addf %s, %a : f32
    scf.yield %t : f32
  }
  memref.store %sum, %acc[%c0] : memref<1xf32>
  func.return
}

// Constant bounds: 1024 float32 (4 KiB) are too few, known at compile time: no run-time choice;
// 1 Mi float32 (4 MiB) stream where y's first element allows.
// CHECK-LABEL: func.func @constant_bounds
// CHECK:         scf.for
// CHECK-NOT:     nontemporal
// CHECK:         scf.if %streamed {
// CHECK:           nontemporal = true
func.func @constant_bounds(%x: memref<?xf32>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %small = arith.constant 1024 : index
  %large = arith.constant 1048576 : index
  scf.for %i = %c0 to %small step %c1 {
    %a = memref.load %x[%i] : memref<?xf32>
    memref.store %a, %y[%i] : memref<?xf32>
  }
  scf.for %i = %c0 to %large step %c1 {
    %a = memref.load %x[%i] : memref<?xf32>
    memref.store %a, %y[%i] : memref<?xf32>
  }
  func.return
}

// An output the function reads again after the loop (a later loop, or a call it is handed to)
// stays in the caches; one that is only stored into, through views too, streams.
// CHECK-LABEL: func.func @read_later
// CHECK-NOT:     nontemporal
// CHECK:         func.return
func.func @read_later(%x: memref<?xf32>, %y: memref<?xf32>, %acc: memref<1xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %a = memref.load %x[%i] : memref<?xf32>
    memref.store %a, %y[%i] : memref<?xf32>
  }
  %view = memref.subview %y[0] [%n] [1] : memref<?xf32> to memref<?xf32, strided<[1]>>
  %first = memref.load %view[%c0] : memref<?xf32, strided<[1]>>
  memref.store %first, %acc[%c0] : memref<1xf32>
  func.return
}

// CHECK-LABEL: func.func @stored_through_views
// CHECK:         scf.if %streamed {
// CHECK:           nontemporal = true
func.func @stored_through_views(%x: memref<?xf32>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  %view = memref.subview %y[0] [%n] [1] : memref<?xf32> to memref<?xf32, strided<[1]>>
  %other = memref.subview %y[0] [%n] [1] : memref<?xf32> to memref<?xf32, strided<[1]>>
  %m = memref.dim %other, %c0 : memref<?xf32, strided<[1]>>
  scf.for %i = %c0 to %m step %c1 {
    %a = memref.load %x[%i] : memref<?xf32>
    memref.store %a, %view[%i] : memref<?xf32, strided<[1]>>
  }
  func.return
}

// A loop inside loops that call nothing: what the nest stores through the store (its trips
// times theirs: a row at a time, 8 rows of 32768 float32 here, known at compile time) decides,
// and one fence follows the outermost loop instead of one per row. Where a loop around calls
// a function (the runtime's flag services), the fence stays after the streamed loop itself.
// CHECK-LABEL: func.func @rows
// CHECK:         scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           %stored_bytes = arith.muli %{{.*}}, %{{.*}} : index
// CHECK:           scf.if %streamed {
// CHECK:             vector.store %{{.*}}, %y[%[[R]], %{{.*}}] {alignment = 64 : i64, nontemporal = true}
// CHECK-NOT:         sfence
// CHECK:           } else {
// CHECK:             } {train.vectorized}
// CHECK:             }
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    llvm.call_intrinsic "llvm.x86.sse.sfence"() : () -> ()
// CHECK-NEXT:    func.return
func.func @rows(%x: memref<?xf32>, %y: memref<8x32768xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %d = arith.constant 32768 : index
  scf.for %r = %c0 to %c8 step %c1 {
    scf.for %i = %c0 to %d step %c1 {
      %a = memref.load %x[%i] : memref<?xf32>
      memref.store %a, %y[%r, %i] : memref<8x32768xf32>
    }
  }
  func.return
}

// CHECK-LABEL: func.func @rows_with_a_call
// CHECK:         scf.for
// CHECK:           scf.if %streamed {
// CHECK:             nontemporal = true
// CHECK:             llvm.call_intrinsic "llvm.x86.sse.sfence"() : () -> ()
// CHECK-NEXT:      } else {
// CHECK:           func.call @flag
func.func private @flag(index)
func.func @rows_with_a_call(%x: memref<?xf32>, %y: memref<8x32768xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %d = arith.constant 32768 : index
  scf.for %r = %c0 to %c8 step %c1 {
    scf.for %i = %c0 to %d step %c1 {
      %a = memref.load %x[%i] : memref<?xf32>
      memref.store %a, %y[%r, %i] : memref<8x32768xf32>
    }
    func.call @flag(%r) : (index) -> ()
  }
  func.return
}

// A row of 32 float32 in 8 rows (1 KiB), known at compile time: too little, no choice emitted.
// CHECK-LABEL: func.func @small_rows
// CHECK-NOT:     nontemporal
// CHECK-NOT:     sfence
// CHECK:         func.return
func.func @small_rows(%x: memref<?xf32>, %y: memref<8x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %d = arith.constant 32 : index
  scf.for %r = %c0 to %c8 step %c1 {
    scf.for %i = %c0 to %d step %c1 {
      %a = memref.load %x[%i] : memref<?xf32>
      memref.store %a, %y[%r, %i] : memref<8x32xf32>
    }
  }
  func.return
}
