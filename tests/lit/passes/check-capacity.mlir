// check-capacity: in each function the local buffers of a level, padded to its alignment and
// counted twice when double-buffered, fit its capacity; the first one that does not is named at
// its line with its size and the level's capacity. npu-a2: UB 192 KiB, L0A 64 KiB, 32-byte alignment.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics -p 'check-capacity{target=npu-a2}'
// The tiled stage runs the same check:
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics --target npu-a2 --stage tiled
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics -p 'check-capacity{target=npu-a2}' | FileCheck %s

// What fits prints: a level filled exactly, buffers of other levels and of other functions (other
// kernels) counted apart.
// 128*256*2 = 64 KiB fills L0A; three double-buffered 32 KiB tiles fill the UB (192 KiB).
// CHECK-LABEL: func.func @l0a_exactly_full
// CHECK:         npu.alloc_local : memref<128x256xbf16, #npu.mem<l0a>>
// CHECK-LABEL: func.func @ub_exactly_full
// CHECK-COUNT-3: npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
// CHECK:         npu.alloc_local : memref<64x256xf32, #npu.mem<l1>>
// CHECK-LABEL: func.func @another_kernel
// CHECK-LABEL: func.func @fits_once
func.func @l0a_exactly_full() {
  %a = npu.alloc_local : memref<128x256xbf16, #npu.mem<l0a>>
  func.return
}
func.func @ub_exactly_full() {
  %x = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
  %y = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
  %dx = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
  %stage = npu.alloc_local : memref<64x256xf32, #npu.mem<l1>>
  func.return
}
func.func @another_kernel() {
  %x = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
  func.return
}
// 128 KiB fits the UB once (but not twice, below).
func.func @fits_once() {
  %once = npu.alloc_local : memref<32x1024xf32, #npu.mem<ub>>
  func.return
}

// -----

func.func @not_twice() {
  // expected-error@+1 {{local buffer %twice (memref<32x1024xf32, #npu.mem<ub>>, 128 KiB x 2 double-buffered = 256 KiB) does not fit level 'ub' of target npu-a2: 256 KiB in use there, capacity 192 KiB}}
  %twice = npu.alloc_local {double_buffer} : memref<32x1024xf32, #npu.mem<ub>>
  func.return
}

// -----

// Double-buffered: 64*1024*4 = 256 KiB, twice.
func.func @double_buffered_too_big() {
  // expected-error@+1 {{local buffer %b (memref<64x1024xf32, #npu.mem<ub>>, 256 KiB x 2 double-buffered = 512 KiB) does not fit level 'ub' of target npu-a2: 512 KiB in use there, capacity 192 KiB}}
  %b = npu.alloc_local {double_buffer} : memref<64x1024xf32, #npu.mem<ub>>
  func.return
}

// -----

// Single-buffered: 128*257*2 = 64.25 KiB > L0A.
func.func @l0a_too_big() {
  // expected-error@+1 {{local buffer %a (memref<128x257xbf16, #npu.mem<l0a>>, 64.25 KiB) does not fit level 'l0a' of target npu-a2: 64.25 KiB in use there, capacity 64 KiB}}
  %a = npu.alloc_local : memref<128x257xbf16, #npu.mem<l0a>>
  func.return
}

// -----

// The UB full, then one byte, padded to the 32-byte alignment, is too many.
func.func @one_byte_too_many() {
  %x = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
  %y = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
  %dx = npu.alloc_local {double_buffer} : memref<8192xf32, #npu.mem<ub>>
  // expected-error@+1 {{local buffer %flag (memref<1xi8, #npu.mem<ub>>, 0.03125 KiB) does not fit level 'ub' of target npu-a2: 192.031 KiB in use there, capacity 192 KiB}}
  %flag = npu.alloc_local : memref<1xi8, #npu.mem<ub>>
  func.return
}

// -----

// Buffers inside loops are live for the whole kernel too.
func.func @in_a_loop(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %a = npu.alloc_local {double_buffer} : memref<16384xf32, #npu.mem<ub>>
  scf.for %i = %c0 to %n step %c1 {
    // expected-error@+1 {{local buffer %b (memref<16384xf32, #npu.mem<ub>>, 64 KiB x 2 double-buffered = 128 KiB) does not fit level 'ub' of target npu-a2: 256 KiB in use there, capacity 192 KiB}}
    %b = npu.alloc_local {double_buffer} : memref<16384xf32, #npu.mem<ub>>
  }
  func.return
}

// -----

func.func @level_the_target_lacks() {
  // expected-error@+1 {{target 'npu-a2' has no memory level 'l2' (levels: gm, l1, l0a, l0b, l0c, ub)}}
  %b = npu.alloc_local : memref<16xf32, #npu.mem<l2>>
  func.return
}

// -----

func.func @buffer_in_global_memory() {
  // expected-error@+1 {{local buffer in 'gm', the global memory of target npu-a2}}
  %b = npu.alloc_local : memref<16xf32, #npu.mem<gm>>
  func.return
}
