// lower-npu-to-cpu: NPU-shaped IR on this CPU. Local buffers become memref.alloc at function
// entry (each call, so each thread, has its own) freed before every return; copies become loop
// nests of loads and stores; block_idx / block_dim become two trailing index arguments and the
// function is marked npu.blocks (the runtime calls it once per block); memory spaces are erased.
// RUN: npugrad-opt %s -p lower-npu-to-cpu | FileCheck %s
// RUN: npugrad-opt %s -p lower-npu-to-cpu | FileCheck %s --check-prefix=ERASED
// RUN: npugrad-opt %s -p lower-npu-to-cpu | FileCheck %s --check-prefix=COUNTERS
// RUN: xdsl-opt %s -p lower-npu-to-cpu | FileCheck %s

// ERASED-NOT: {{npu\.(alloc_local|copy|block_idx|block_dim)}}
// ERASED-NOT: #npu.mem

// CHECK-LABEL: func.func @kernel(
// CHECK-SAME:      %x: memref<100xf32>, %out: memref<100xf32>, %block_idx: index, %block_dim: index) attributes {npu.blocks} {
// CHECK-NEXT:    %ub = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
// CHECK:         scf.for %t = %block_idx to %{{.*}} step %block_dim {
// CHECK:           %src = memref.subview %x[%{{.*}}] [%{{.*}}] [1] : memref<100xf32> to memref<?xf32, strided<[1], offset: ?>>
// CHECK-NEXT:      %tile = memref.subview %ub[0] [%{{.*}}] [1] : memref<16xf32> to memref<?xf32, strided<[1]>>
// The copy in: a loop over the target's size.
// CHECK:           %[[N:.*]] = memref.dim %tile, %{{.*}} : memref<?xf32, strided<[1]>>
// CHECK:           scf.for %[[I:.*]] = %{{.*}} to %[[N]] step %{{.*}} {
// CHECK-NEXT:        %[[V:.*]] = memref.load %src[%[[I]]] : memref<?xf32, strided<[1], offset: ?>>
// CHECK-NEXT:        memref.store %[[V]], %tile[%[[I]]] : memref<?xf32, strided<[1]>>
// CHECK-NEXT:      }
// CHECK:           %dst = memref.subview %out
// CHECK:           scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[W:.*]] = memref.load %tile[%[[J]]] : memref<?xf32, strided<[1]>>
// CHECK-NEXT:        memref.store %[[W]], %dst[%[[J]]] : memref<?xf32, strided<[1], offset: ?>>
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    memref.dealloc %ub : memref<16xf32>
// CHECK-NEXT:    func.return
func.func @kernel(%x: memref<100xf32>, %out: memref<100xf32>) {
  %c16 = arith.constant 16 : index
  %c100 = arith.constant 100 : index
  %bid = npu.block_idx
  %nblk = npu.block_dim
  %ub = npu.alloc_local {double_buffer} : memref<16xf32, #npu.mem<ub>>
  scf.for %t = %bid to %c100 step %nblk {
    %off = arith.muli %t, %c16 : index
    %rest = arith.subi %c100, %off : index
    %n = arith.minsi %c16, %rest : index
    %src = memref.subview %x[%off] [%n] [1] : memref<100xf32> to memref<?xf32, strided<[1], offset: ?>>
    %tile = memref.subview %ub[0] [%n] [1] : memref<16xf32, #npu.mem<ub>> to memref<?xf32, strided<[1]>, #npu.mem<ub>>
    npu.copy %src, %tile : memref<?xf32, strided<[1], offset: ?>>, memref<?xf32, strided<[1]>, #npu.mem<ub>>
    %dst = memref.subview %out[%off] [%n] [1] : memref<100xf32> to memref<?xf32, strided<[1], offset: ?>>
    npu.copy %tile, %dst : memref<?xf32, strided<[1]>, #npu.mem<ub>>, memref<?xf32, strided<[1], offset: ?>>
  }
  func.return
}

// Without block ops: no extra arguments, no npu.blocks. Every return frees the buffers; a 2-D
// copy is a 2-D nest; memory spaces go from argument types too. A copy of unsigned integers
// moves them unchanged.
// CHECK-LABEL: func.func @two_returns(
// CHECK-SAME:      %a: memref<4x8xui8>, %flag: i1, %l1: memref<4x8xui8>) {
// CHECK-NEXT:    %buf = memref.alloc() {alignment = 64 : i64} : memref<4x8xui8>
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[V:.*]] = memref.load %a[%[[I]], %[[J]]] : memref<4x8xui8>
// CHECK-NEXT:        memref.store %[[V]], %buf[%[[I]], %[[J]]] : memref<4x8xui8>
// CHECK:         cf.cond_br %flag, ^[[EARLY:.*]], ^[[LATE:.*]]
// CHECK-NEXT:  ^[[EARLY]]:
// CHECK-NEXT:    memref.dealloc %buf : memref<4x8xui8>
// CHECK-NEXT:    func.return
// CHECK-NEXT:  ^[[LATE]]:
// CHECK:           memref.store %{{.*}}, %l1[%{{.*}}, %{{.*}}] : memref<4x8xui8>
// CHECK:         memref.dealloc %buf : memref<4x8xui8>
// CHECK-NEXT:    func.return
func.func @two_returns(%a: memref<4x8xui8>, %flag: i1, %l1: memref<4x8xui8, #npu.mem<l1>>) {
  %buf = npu.alloc_local : memref<4x8xui8, #npu.mem<l1>>
  npu.copy %a, %buf : memref<4x8xui8>, memref<4x8xui8, #npu.mem<l1>>
  cf.cond_br %flag, ^early, ^late
^early:
  func.return
^late:
  npu.copy %buf, %l1 : memref<4x8xui8, #npu.mem<l1>>, memref<4x8xui8, #npu.mem<l1>>
  func.return
}

// Only block_dim used: both arguments are added all the same (one calling convention).
// CHECK-LABEL: func.func @only_block_dim(
// CHECK-SAME:      %r: memref<1xindex>, %block_idx: index, %block_dim: index) attributes {npu.blocks} {
// CHECK-NEXT:    %{{.*}} = arith.constant 0 : index
// CHECK-NEXT:    memref.store %block_dim, %r[%{{.*}}] : memref<1xindex>
func.func @only_block_dim(%r: memref<1xindex>) {
  %n = npu.block_dim
  %c0 = arith.constant 0 : index
  memref.store %n, %r[%c0] : memref<1xindex>
  func.return
}

// Declarations lose memory spaces too.
// CHECK-LABEL: func.func private @external(memref<4xf32>)
func.func private @external(memref<4xf32, #npu.mem<ub>>)

// A transposed copy reads its source with the indices swapped: target[i, j] = source[j, i].
// CHECK-LABEL: func.func @transposed(
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[V:.*]] = memref.load %w[%[[J]], %[[I]]] : memref<32x16xbf16>
// CHECK-NEXT:        memref.store %[[V]], %{{.*}}[%[[I]], %[[J]]] : memref<16x32xbf16>
func.func @transposed(%w: memref<32x16xbf16>) {
  %b = npu.alloc_local : memref<16x32xbf16, #npu.mem<l0b>>
  npu.copy %w, %b {transpose} : memref<32x16xbf16>, memref<16x32xbf16, #npu.mem<l0b>>
  func.return
}

// Copies out of an accumulator: a converting copy rounds each element with arith.truncf (to
// nearest even, as every other float32 -> bf16/f16 store of the compiler) before the store; an
// accumulating one loads the target, adds the source to it and stores the sum, transposed or not.
// CHECK-LABEL: func.func @fixpipe(
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[V:.*]] = memref.load %acc[%[[I]], %[[J]]] : memref<16x8xf32>
// CHECK-NEXT:        %[[H:.*]] = arith.truncf %[[V]] : f32 to bf16
// CHECK-NEXT:        memref.store %[[H]], %y[%[[I]], %[[J]]] : memref<16x8xbf16>
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[S:.*]] = memref.load %acc[%[[I]], %[[J]]] : memref<16x8xf32>
// CHECK-NEXT:        %[[T:.*]] = memref.load %part[%[[I]], %[[J]]] : memref<16x8xf32>
// CHECK-NEXT:        %[[SUM:.*]] = arith.addf %[[T]], %[[S]] : f32
// CHECK-NEXT:        memref.store %[[SUM]], %part[%[[I]], %[[J]]] : memref<16x8xf32>
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[S:.*]] = memref.load %acc[%[[J]], %[[I]]] : memref<16x8xf32>
// CHECK-NEXT:        %[[T:.*]] = memref.load %part_t[%[[I]], %[[J]]] : memref<8x16xf32>
// CHECK-NEXT:        %[[SUM:.*]] = arith.addf %[[T]], %[[S]] : f32
// CHECK-NEXT:        memref.store %[[SUM]], %part_t[%[[I]], %[[J]]] : memref<8x16xf32>
func.func @fixpipe(%acc: memref<16x8xf32, #npu.mem<l0c>>, %y: memref<16x8xbf16>, %part: memref<16x8xf32>,
                   %part_t: memref<8x16xf32>) {
  npu.copy %acc, %y : memref<16x8xf32, #npu.mem<l0c>>, memref<16x8xbf16>
  npu.copy %acc, %part {accumulate} : memref<16x8xf32, #npu.mem<l0c>>, memref<16x8xf32>
  npu.copy %acc, %part_t {transpose, accumulate} : memref<16x8xf32, #npu.mem<l0c>>, memref<8x16xf32>
  func.return
}

// The launch services become calls of the runtime (npugrad/runtime/sync.py): the barrier a call
// of @npugrad_barrier, each shared workspace a call returning the launch's buffer of that slot
// (numbered per function, in order), its element size in bytes and every size; the function is
// marked npu.synchronized (the runtime runs all its blocks at once). One declaration per symbol.
// CHECK-LABEL: func.func @wavefront(
// CHECK-SAME:      %h: index, %steps: index, %block_idx: index, %block_dim: index) attributes {npu.synchronized, npu.blocks} {
// CHECK:         %[[RING:.*]] = func.call @npugrad_shared_r2_f32(%[[SLOT0:.*]], %[[FOUR:.*]], %block_dim, %[[C64:.*]]) : (index, index, index, index) -> memref<?x?xf32>
// CHECK-NEXT:    %ring = "memref.cast"(%[[RING]]) : (memref<?x?xf32>) -> memref<?x64xf32>
// CHECK:         %[[FLAGS:.*]] = func.call @npugrad_shared_r1_i32(%[[SLOT1:.*]], %{{.*}}, %{{.*}}) : (index, index, index) -> memref<?xi32>
// CHECK-NEXT:    %flags = "memref.cast"(%[[FLAGS]]) : (memref<?xi32>) -> memref<8xi32>
// CHECK:         scf.for
// CHECK-NEXT:      func.call @npugrad_barrier() : () -> ()
// CHECK:           func.call @npugrad_barrier() : () -> ()
// CHECK-DAG:   func.func private @npugrad_barrier() -> ()
// CHECK-DAG:   func.func private @npugrad_shared_r2_f32(index, index, index, index) -> memref<?x?xf32>
// CHECK-DAG:   func.func private @npugrad_shared_r1_i32(index, index, index) -> memref<?xi32>
// ERASED-NOT:  npu.barrier
// ERASED-NOT:  npu.alloc_shared
func.func @wavefront(%h: index, %steps: index) {
  %nblk = npu.block_dim
  %ring = npu.alloc_shared(%nblk) : memref<?x64xf32>
  %flags = npu.alloc_shared() : memref<8xi32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %s = %c0 to %steps step %c1 {
    npu.barrier
    %v = memref.load %ring[%s, %c0] : memref<?x64xf32>
    memref.store %v, %ring[%c0, %s] : memref<?x64xf32>
    npu.barrier
  }
  %f = memref.load %flags[%c0] : memref<8xi32>
  memref.store %f, %flags[%c1] : memref<8xi32>
  func.return
}

// Flags become calls with the counter's address (the memref's aligned pointer plus 8 bytes per
// element before it) and the value: SUPPORT_IR's machine code (lowering/machine_code.py), no
// callback into Python. A function that sets or waits for flags runs its blocks at once.
// COUNTERS-LABEL: func.func @chain(
// COUNTERS-SAME:      %steps: index, %block_idx: index, %block_dim: index) attributes {npu.synchronized, npu.blocks} {
// COUNTERS:         %flags = func.call @npugrad_shared_r1_i64(
// COUNTERS:         scf.for %[[S:.*]] = %{{.*}} to %steps
// COUNTERS:           %[[BASE:.*]] = "memref.extract_aligned_pointer_as_index"(%flags) : (memref<?xi64>) -> index
// COUNTERS-NEXT:      %[[BYTES:.*]] = arith.muli %prev, %{{.*}} : index
// COUNTERS-NEXT:      %[[AT:.*]] = arith.addi %[[BASE]], %[[BYTES]] : index
// COUNTERS-NEXT:      func.call @npugrad_wait_flag(%[[AT]], %[[S]]) : (index, index) -> ()
// COUNTERS:           %[[MINE_BASE:.*]] = "memref.extract_aligned_pointer_as_index"(%flags)
// COUNTERS-NEXT:      %[[MINE_BYTES:.*]] = arith.muli %block_idx, %{{.*}} : index
// COUNTERS-NEXT:      %[[MINE:.*]] = arith.addi %[[MINE_BASE]], %[[MINE_BYTES]] : index
// COUNTERS-NEXT:      func.call @npugrad_set_flag(%[[MINE]], %next) : (index, index) -> ()
// COUNTERS-DAG:   func.func private @npugrad_set_flag(index, index) -> ()
// COUNTERS-DAG:   func.func private @npugrad_wait_flag(index, index) -> ()
// ERASED-NOT:  npu.set_flag
// ERASED-NOT:  npu.wait_flag
func.func @chain(%steps: index) {
  %bid = npu.block_idx
  %nblk = npu.block_dim
  %flags = npu.alloc_shared(%nblk) : memref<?xi64>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %prev = arith.subi %bid, %c1 : index
  scf.for %s = %c0 to %steps step %c1 {
    npu.wait_flag %flags[%prev], %s : memref<?xi64>
    %next = arith.addi %s, %c1 : index
    npu.set_flag %flags[%bid], %next : memref<?xi64>
  }
  func.return
}
