// The npu dialect prints what it parses: every op, and #npu.mem<level> wherever a memref type
// goes (arguments, results, views), in the custom and the generic form, and plain xdsl-opt
// knows it (through npugrad's xdsl.universe entry point).
// RUN: npugrad-opt %s | npugrad-opt | FileCheck %s
// RUN: npugrad-opt %s --print-op-generic | npugrad-opt | FileCheck %s
// RUN: npugrad-opt %s --print-op-generic | FileCheck %s --check-prefix=GENERIC
// RUN: xdsl-opt %s | xdsl-opt | FileCheck %s

// CHECK-LABEL: func.func @every_op(
// CHECK-SAME:      %x: memref<100x64xf32>, %l1: memref<64x64xbf16, #npu.mem<l1>>)
// CHECK-NEXT:    %bid = npu.block_idx
// CHECK-NEXT:    %n = npu.block_dim
// CHECK-NEXT:    %ub = npu.alloc_local {double_buffer} : memref<16x64xf32, #npu.mem<ub>>
// CHECK-NEXT:    %acc = npu.alloc_local : memref<16x64xf32, #npu.mem<l0c>>
// CHECK-NEXT:    %s = npu.alloc_local : memref<f16, #npu.mem<ub>>
// CHECK:         %tile = memref.subview %x[%{{.*}}, 0] [16, 64] [1, 1] : memref<100x64xf32> to memref<16x64xf32, strided<[64, 1], offset: ?>>
// CHECK-NEXT:    npu.copy %tile, %ub : memref<16x64xf32, strided<[64, 1], offset: ?>>, memref<16x64xf32, #npu.mem<ub>>
// CHECK-NEXT:    npu.copy %ub, %acc : memref<16x64xf32, #npu.mem<ub>>, memref<16x64xf32, #npu.mem<l0c>>
// CHECK-NEXT:    %rows = arith.constant 4 : index
// CHECK-NEXT:    %part = memref.subview %ub[0, 0] [%{{.*}}, 64] [1, 1] : memref<16x64xf32, #npu.mem<ub>> to memref<?x64xf32, strided<[64, 1]>, #npu.mem<ub>>
// CHECK-NEXT:    %dst = memref.subview %x[0, 0] [%{{.*}}, 64] [1, 1] : memref<100x64xf32> to memref<?x64xf32, strided<[64, 1]>>
// CHECK-NEXT:    npu.copy %part, %dst : memref<?x64xf32, strided<[64, 1]>, #npu.mem<ub>>, memref<?x64xf32, strided<[64, 1]>>
// CHECK-NEXT:    npu.copy %s, %s : memref<f16, #npu.mem<ub>>, memref<f16, #npu.mem<ub>>
// CHECK-NEXT:    %flags = npu.alloc_shared(%n) : memref<?xi64>
// CHECK-NEXT:    npu.set_flag %flags[%bid], %rows : memref<?xi64>
// CHECK-NEXT:    npu.wait_flag %flags[%n], %rows : memref<?xi64>
// CHECK-NEXT:    func.return

// GENERIC:       %bid = "npu.block_idx"() : () -> index
// GENERIC-NEXT:  %n = "npu.block_dim"() : () -> index
// GENERIC-NEXT:  %ub = "npu.alloc_local"() <{double_buffer}> : () -> memref<16x64xf32, #npu.mem<ub>>
// GENERIC-NEXT:  %acc = "npu.alloc_local"() : () -> memref<16x64xf32, #npu.mem<l0c>>
// GENERIC:       "npu.copy"(%tile, %ub) : (memref<16x64xf32, strided<[64, 1], offset: ?>>, memref<16x64xf32, #npu.mem<ub>>) -> ()
// GENERIC:       "npu.set_flag"(%flags, %bid, %rows) : (memref<?xi64>, index, index) -> ()
// GENERIC-NEXT:  "npu.wait_flag"(%flags, %n, %rows) : (memref<?xi64>, index, index) -> ()
func.func @every_op(%x: memref<100x64xf32>, %l1: memref<64x64xbf16, #npu.mem<l1>>) {
  %bid = npu.block_idx
  %n = npu.block_dim
  %ub = npu.alloc_local {double_buffer} : memref<16x64xf32, #npu.mem<ub>>
  %acc = npu.alloc_local : memref<16x64xf32, #npu.mem<l0c>>
  %s = npu.alloc_local : memref<f16, #npu.mem<ub>>
  %c16 = arith.constant 16 : index
  %row = arith.muli %bid, %c16 : index
  %tile = memref.subview %x[%row, 0] [16, 64] [1, 1] : memref<100x64xf32> to memref<16x64xf32, strided<[64, 1], offset: ?>>
  npu.copy %tile, %ub : memref<16x64xf32, strided<[64, 1], offset: ?>>, memref<16x64xf32, #npu.mem<ub>>
  npu.copy %ub, %acc : memref<16x64xf32, #npu.mem<ub>>, memref<16x64xf32, #npu.mem<l0c>>
  %rows = arith.constant 4 : index
  %part = memref.subview %ub[0, 0] [%rows, 64] [1, 1] : memref<16x64xf32, #npu.mem<ub>> to memref<?x64xf32, strided<[64, 1]>, #npu.mem<ub>>
  %dst = memref.subview %x[0, 0] [%rows, 64] [1, 1] : memref<100x64xf32> to memref<?x64xf32, strided<[64, 1]>>
  npu.copy %part, %dst : memref<?x64xf32, strided<[64, 1]>, #npu.mem<ub>>, memref<?x64xf32, strided<[64, 1]>>
  npu.copy %s, %s : memref<f16, #npu.mem<ub>>, memref<f16, #npu.mem<ub>>
  %flags = npu.alloc_shared(%n) : memref<?xi64>
  npu.set_flag %flags[%bid], %rows : memref<?xi64>
  npu.wait_flag %flags[%n], %rows : memref<?xi64>
  func.return
}

// A dynamic size on one side of a copy is checked against the other side at run time.
// CHECK-LABEL: func.func @dynamic_copy(
// CHECK-NEXT:    npu.copy %a, %b : memref<?xi64>, memref<8xi64, #npu.mem<ub>>
func.func @dynamic_copy(%a: memref<?xi64>, %b: memref<8xi64, #npu.mem<ub>>) {
  npu.copy %a, %b : memref<?xi64>, memref<8xi64, #npu.mem<ub>>
  func.return
}

// A transposed copy: the layout change a matrix operand needs, made by the transfer.
// CHECK-LABEL: func.func @transposed_copy(
// CHECK-NEXT:    npu.copy %w, %b {transpose} : memref<32x16xbf16, strided<[4096, 1], offset: ?>>, memref<16x32xbf16, #npu.mem<l0b>>
// GENERIC:       "npu.copy"(%w, %b) <{transpose}> : (memref<32x16xbf16, strided<[4096, 1], offset: ?>>, memref<16x32xbf16, #npu.mem<l0b>>) -> ()
func.func @transposed_copy(%w: memref<32x16xbf16, strided<[4096, 1], offset: ?>>, %b: memref<16x32xbf16, #npu.mem<l0b>>) {
  npu.copy %w, %b {transpose} : memref<32x16xbf16, strided<[4096, 1], offset: ?>>, memref<16x32xbf16, #npu.mem<l0b>>
  func.return
}

// The copies out of an accumulator: float32 rounded into bf16 (the differing element types say
// so), and added into the target (accumulate), also transposed (the attributes in either order).
// CHECK-LABEL: func.func @fixpipe_copies(
// CHECK-NEXT:    npu.copy %acc, %y : memref<16x32xf32, #npu.mem<l0c>>, memref<16x32xbf16, strided<[4096, 1], offset: ?>>
// CHECK-NEXT:    npu.copy %acc, %h : memref<16x32xf32, #npu.mem<l0c>>, memref<16x32xf16, #npu.mem<ub>>
// CHECK-NEXT:    npu.copy %acc, %part {accumulate} : memref<16x32xf32, #npu.mem<l0c>>, memref<16x32xf32, strided<[4096, 1], offset: ?>>
// CHECK-NEXT:    npu.copy %acc, %part_t {accumulate, transpose} : memref<16x32xf32, #npu.mem<l0c>>, memref<32x16xf32>
// GENERIC:       "npu.copy"(%acc, %y) : (memref<16x32xf32, #npu.mem<l0c>>, memref<16x32xbf16, strided<[4096, 1], offset: ?>>) -> ()
// GENERIC:       "npu.copy"(%acc, %part) <{accumulate}> : (memref<16x32xf32, #npu.mem<l0c>>, memref<16x32xf32, strided<[4096, 1], offset: ?>>) -> ()
// GENERIC-NEXT:  "npu.copy"(%acc, %part_t) <{accumulate, transpose}> : (memref<16x32xf32, #npu.mem<l0c>>, memref<32x16xf32>) -> ()
func.func @fixpipe_copies(%acc: memref<16x32xf32, #npu.mem<l0c>>, %y: memref<16x32xbf16, strided<[4096, 1], offset: ?>>,
                          %h: memref<16x32xf16, #npu.mem<ub>>, %part: memref<16x32xf32, strided<[4096, 1], offset: ?>>,
                          %part_t: memref<32x16xf32>) {
  npu.copy %acc, %y : memref<16x32xf32, #npu.mem<l0c>>, memref<16x32xbf16, strided<[4096, 1], offset: ?>>
  npu.copy %acc, %h : memref<16x32xf32, #npu.mem<l0c>>, memref<16x32xf16, #npu.mem<ub>>
  npu.copy %acc, %part {accumulate} : memref<16x32xf32, #npu.mem<l0c>>, memref<16x32xf32, strided<[4096, 1], offset: ?>>
  npu.copy %acc, %part_t {accumulate, transpose} : memref<16x32xf32, #npu.mem<l0c>>, memref<32x16xf32>
  func.return
}

// The launch services: a workspace every block of a launch shares, a barrier in a loop.
// CHECK-LABEL: func.func @launch_services(
// CHECK-NEXT:    %nblk = npu.block_dim
// CHECK-NEXT:    %ring = npu.alloc_shared(%nblk, %h) : memref<?x16x?xf32>
// CHECK-NEXT:    %fixed = npu.alloc_shared() : memref<8xbf16>
// CHECK:         scf.for
// CHECK-NEXT:      npu.barrier
// GENERIC:       %ring = "npu.alloc_shared"(%nblk, %h) : (index, index) -> memref<?x16x?xf32>
// GENERIC:       "npu.barrier"() : () -> ()
func.func @launch_services(%h: index, %steps: index) {
  %nblk = npu.block_dim
  %ring = npu.alloc_shared(%nblk, %h) : memref<?x16x?xf32>
  %fixed = npu.alloc_shared() : memref<8xbf16>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %s = %c0 to %steps step %c1 {
    npu.barrier
  }
  func.return
}
