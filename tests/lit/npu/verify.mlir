// The npu verifier: one chunk per rule, the error at the op's line, in MLIR's `'op' op ...` form.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics | FileCheck %s

// Valid edge cases print: a 0-D buffer, a copy with a dynamic size on one side.
// CHECK-LABEL: func.func @valid
// CHECK-NEXT:    %b = npu.alloc_local : memref<f32, #npu.mem<ub>>
// CHECK-NEXT:    npu.copy %a, %c : memref<?x4xf32>, memref<8x4xf32, #npu.mem<l1>>
func.func @valid(%a: memref<?x4xf32>, %c: memref<8x4xf32, #npu.mem<l1>>) {
  %b = npu.alloc_local : memref<f32, #npu.mem<ub>>
  npu.copy %a, %c : memref<?x4xf32>, memref<8x4xf32, #npu.mem<l1>>
  func.return
}

// -----

func.func @alloc_in_global_memory() {
  // expected-error@+1 {{'npu.alloc_local' op result must be in a local memory level (#npu.mem<level>), got memref<16xf32>}}
  %b = npu.alloc_local : memref<16xf32>
  func.return
}

// -----

func.func @alloc_in_another_memory_space() {
  // expected-error@+1 {{'npu.alloc_local' op result must be in a local memory level (#npu.mem<level>), got memref<16xf32, 1 : i64>}}
  %b = npu.alloc_local : memref<16xf32, 1>
  func.return
}

// -----

func.func @alloc_dynamic_shape() {
  // expected-error@+1 {{'npu.alloc_local' op result must have a static shape (a local buffer has a fixed size), got memref<?x16xf32, #npu.mem<ub>>}}
  %b = npu.alloc_local : memref<?x16xf32, #npu.mem<ub>>
  func.return
}

// -----

func.func @alloc_strided_layout() {
  // expected-error@+1 {{'npu.alloc_local' op result must have the identity layout (a local buffer is contiguous), got memref<16x16xf32, strided<[32, 1]>, #npu.mem<ub>>}}
  %b = npu.alloc_local : memref<16x16xf32, strided<[32, 1]>, #npu.mem<ub>>
  func.return
}

// -----

func.func @alloc_not_a_memref() {
  // expected-error@+1 {{'npu.alloc_local' op result 'result' at position 0 does not verify}}
  %b = "npu.alloc_local"() : () -> tensor<16xf32>
  func.return
}

// -----

// Valid: the copies out of an accumulator (A2's FixPipe): float32 rounded into bf16 or f16, and
// added into float32 (accumulate), transposed or not.
// CHECK-LABEL: func.func @valid_fixpipe_copies
// CHECK-NEXT:    npu.copy %acc, %h : memref<16x8xf32, #npu.mem<l0c>>, memref<16x8xbf16>
// CHECK-NEXT:    npu.copy %acc, %g : memref<16x8xf32, #npu.mem<l0c>>, memref<16x8xf16>
// CHECK-NEXT:    npu.copy %acc, %s {accumulate} : memref<16x8xf32, #npu.mem<l0c>>, memref<16x8xf32>
// CHECK-NEXT:    npu.copy %acc, %t {transpose, accumulate} : memref<16x8xf32, #npu.mem<l0c>>, memref<8x16xf32>
func.func @valid_fixpipe_copies(%acc: memref<16x8xf32, #npu.mem<l0c>>, %h: memref<16x8xbf16>, %g: memref<16x8xf16>,
                                %s: memref<16x8xf32>, %t: memref<8x16xf32>) {
  npu.copy %acc, %h : memref<16x8xf32, #npu.mem<l0c>>, memref<16x8xbf16>
  npu.copy %acc, %g : memref<16x8xf32, #npu.mem<l0c>>, memref<16x8xf16>
  npu.copy %acc, %s {accumulate} : memref<16x8xf32, #npu.mem<l0c>>, memref<16x8xf32>
  npu.copy %acc, %t {transpose, accumulate} : memref<16x8xf32, #npu.mem<l0c>>, memref<8x16xf32>
  func.return
}

// -----

// A copy converts float32 into a narrower float only: not the other way.
func.func @copy_element_types(%a: memref<16xbf16>, %b: memref<16xf32, #npu.mem<ub>>) {
  // expected-error@+1 {{'npu.copy' op source and target must have the same element type, or convert f32 into bf16 or f16 (rounding), got bf16 and f32}}
  npu.copy %a, %b : memref<16xbf16>, memref<16xf32, #npu.mem<ub>>
  func.return
}

// -----

// Nor into an integer.
func.func @copy_float_to_integer(%a: memref<16xf32, #npu.mem<l0c>>, %b: memref<16xi32>) {
  // expected-error@+1 {{'npu.copy' op source and target must have the same element type, or convert f32 into bf16 or f16 (rounding), got f32 and i32}}
  npu.copy %a, %b : memref<16xf32, #npu.mem<l0c>>, memref<16xi32>
  func.return
}

// -----

// Nor between two narrow floats.
func.func @copy_f16_to_bf16(%a: memref<16xf16>, %b: memref<16xbf16, #npu.mem<ub>>) {
  // expected-error@+1 {{'npu.copy' op source and target must have the same element type, or convert f32 into bf16 or f16 (rounding), got f16 and bf16}}
  npu.copy %a, %b : memref<16xf16>, memref<16xbf16, #npu.mem<ub>>
  func.return
}

// -----

func.func @accumulate_bf16(%a: memref<16xbf16, #npu.mem<ub>>, %b: memref<16xbf16>) {
  // expected-error@+1 {{'npu.copy' op with accumulate needs f32 elements (an atomic add in float32), got bf16 and bf16}}
  npu.copy %a, %b {accumulate} : memref<16xbf16, #npu.mem<ub>>, memref<16xbf16>
  func.return
}

// -----

func.func @accumulate_integers(%a: memref<16xi32, #npu.mem<ub>>, %b: memref<16xi32>) {
  // expected-error@+1 {{'npu.copy' op with accumulate needs f32 elements (an atomic add in float32), got i32 and i32}}
  npu.copy %a, %b {accumulate} : memref<16xi32, #npu.mem<ub>>, memref<16xi32>
  func.return
}

// -----

func.func @accumulate_with_a_conversion(%a: memref<16xf32, #npu.mem<l0c>>, %b: memref<16xbf16>) {
  // expected-error@+1 {{'npu.copy' op with accumulate cannot convert: source and target must both be f32, got f32 and bf16}}
  npu.copy %a, %b {accumulate} : memref<16xf32, #npu.mem<l0c>>, memref<16xbf16>
  func.return
}

// -----

func.func @accumulate_transposed_keeps_the_shape(%a: memref<16x8xf32, #npu.mem<l0c>>, %b: memref<16x8xf32>) {
  // expected-error@+1 {{'npu.copy' op the target's shape must be the source's transposed, got memref<16x8xf32, #npu.mem<l0c>> and memref<16x8xf32>}}
  npu.copy %a, %b {transpose, accumulate} : memref<16x8xf32, #npu.mem<l0c>>, memref<16x8xf32>
  func.return
}

// -----

func.func @copy_shapes(%a: memref<16x8xf32>, %b: memref<8x16xf32, #npu.mem<ub>>) {
  // expected-error@+1 {{'npu.copy' op source and target must have the same shape, got memref<16x8xf32> and memref<8x16xf32, #npu.mem<ub>>}}
  npu.copy %a, %b : memref<16x8xf32>, memref<8x16xf32, #npu.mem<ub>>
  func.return
}

// -----

func.func @copy_ranks(%a: memref<128xf32>, %b: memref<8x16xf32, #npu.mem<ub>>) {
  // expected-error@+1 {{'npu.copy' op source and target must have the same shape, got memref<128xf32> and memref<8x16xf32, #npu.mem<ub>>}}
  npu.copy %a, %b : memref<128xf32>, memref<8x16xf32, #npu.mem<ub>>
  func.return
}

// -----

func.func @copy_not_a_memref(%a: tensor<16xf32>, %b: memref<16xf32, #npu.mem<ub>>) {
  // expected-error@+1 {{'npu.copy' op operand 'source' at position 0 does not verify}}
  "npu.copy"(%a, %b) : (tensor<16xf32>, memref<16xf32, #npu.mem<ub>>) -> ()
  func.return
}

// -----

func.func @block_idx_not_index() {
  // expected-error@+1 {{'npu.block_idx' op result 'result' at position 0 does not verify}}
  %b = "npu.block_idx"() : () -> i32
  func.return
}

// -----

func.func @memory_space_not_an_identifier() {
  // expected-error@+1 {{identifier expected (a memory level name)}}
  %b = npu.alloc_local : memref<16xf32, #npu.mem<"ub">>
  func.return
}

// -----

func.func @transpose_keeps_the_shape(%a: memref<32x16xbf16>, %b: memref<32x16xbf16, #npu.mem<l0b>>) {
  // expected-error@+1 {{'npu.copy' op the target's shape must be the source's transposed, got memref<32x16xbf16> and memref<32x16xbf16, #npu.mem<l0b>>}}
  npu.copy %a, %b {transpose} : memref<32x16xbf16>, memref<32x16xbf16, #npu.mem<l0b>>
  func.return
}

// -----

func.func @transpose_of_a_vector(%a: memref<16xf32>, %b: memref<16xf32, #npu.mem<ub>>) {
  // expected-error@+1 {{'npu.copy' op with transpose needs a source and a target of rank 2, got memref<16xf32> and memref<16xf32, #npu.mem<ub>>}}
  npu.copy %a, %b {transpose} : memref<16xf32>, memref<16xf32, #npu.mem<ub>>
  func.return
}

// -----

// Valid: a barrier in a loop every block runs equally often, a workspace sized by the block count.
// CHECK-LABEL: func.func @valid_launch_services
// CHECK:         %ws = npu.alloc_shared(%rows) : memref<?x64xf32>
// CHECK:         npu.barrier
func.func @valid_launch_services(%n: index) {
  %nblk = npu.block_dim
  %c16 = arith.constant 16 : index
  %rows = arith.muli %nblk, %c16 : index
  %ws = npu.alloc_shared(%rows) : memref<?x64xf32>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %s = %c0 to %n step %c1 {
    npu.barrier
  }
  func.return
}

// -----

func.func @barrier_under_a_condition(%c: i1) {
  scf.if %c {
    // expected-error@+1 {{'npu.barrier' op must be reached by every block equally often: it may be nested in scf.for loops only, not in 'scf.if'}}
    npu.barrier
  }
  func.return
}

// -----

func.func @barrier_in_a_loop_that_depends_on_the_block(%n: index) {
  %bid = npu.block_idx
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ub = arith.addi %n, %bid : index
  scf.for %s = %c0 to %ub step %c1 {
    // expected-error@+1 {{'npu.barrier' op is in a loop whose bounds depend on npu.block_idx: blocks would pass it a different number of times}}
    npu.barrier
  }
  func.return
}

// -----

func.func @shared_workspace_in_a_loop(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %s = %c0 to %n step %c1 {
    // expected-error@+1 {{'npu.alloc_shared' op must be at the top level of a function, or under scf.if only (one buffer per launch)}}
    %ws = npu.alloc_shared() : memref<16xf32>
  }
  func.return
}

// -----

func.func @shared_workspace_in_a_local_level() {
  // expected-error@+1 {{'npu.alloc_shared' op result must be in global memory (no memory space), got memref<16xf32, #npu.mem<ub>>}}
  %ws = npu.alloc_shared() : memref<16xf32, #npu.mem<ub>>
  func.return
}

// -----

func.func @shared_workspace_missing_a_size() {
  // expected-error@+1 {{'npu.alloc_shared' op needs one size per dynamic dimension of memref<?x?xf32> (2), got 0}}
  %ws = npu.alloc_shared() : memref<?x?xf32>
  func.return
}

// -----

func.func @shared_workspace_sized_per_block() {
  %bid = npu.block_idx
  // expected-error@+1 {{'npu.alloc_shared' op sizes must be the same in every block (not computed from npu.block_idx)}}
  %ws = npu.alloc_shared(%bid) : memref<?xf32>
  func.return
}

// -----

func.func @shared_workspace_strided() {
  // expected-error@+1 {{'npu.alloc_shared' op result must have the identity layout, got memref<16xf32, strided<[2]>>}}
  %ws = npu.alloc_shared() : memref<16xf32, strided<[2]>>
  func.return
}

// -----

// Valid: a flag set under a condition and waited for in a loop whose bounds depend on the block
// (unlike a barrier, a flag waits only for the block that sets it).
// CHECK-LABEL: func.func @valid_flags
// CHECK:         npu.set_flag %flags[%bid], %s : memref<?xi64>
// CHECK:         npu.wait_flag %flags[%c0], %s : memref<?xi64>
func.func @valid_flags(%n: index, %c: i1) {
  %bid = npu.block_idx
  %nblk = npu.block_dim
  %flags = npu.alloc_shared(%nblk) : memref<?xi64>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %ub = arith.addi %n, %bid : index
  scf.for %s = %c0 to %ub step %c1 {
    scf.if %c {
      npu.set_flag %flags[%bid], %s : memref<?xi64>
    }
    npu.wait_flag %flags[%c0], %s : memref<?xi64>
  }
  func.return
}

// -----

func.func @flags_of_the_wrong_type(%f: memref<?xi32>, %i: index) {
  // expected-error@+1 {{'npu.set_flag' op flags must be a rank-1 memref of i64 counters, got memref<?xi32>}}
  npu.set_flag %f[%i], %i : memref<?xi32>
  func.return
}

// -----

func.func @flags_of_rank_two(%f: memref<?x8xi64>, %i: index) {
  // expected-error@+1 {{'npu.wait_flag' op flags must be a rank-1 memref of i64 counters, got memref<?x8xi64>}}
  npu.wait_flag %f[%i], %i : memref<?x8xi64>
  func.return
}

// -----

func.func @flags_in_a_local_level(%f: memref<8xi64, #npu.mem<ub>>, %i: index) {
  // expected-error@+1 {{'npu.wait_flag' op flags must be in global memory (no memory space), got memref<8xi64, #npu.mem<ub>>}}
  npu.wait_flag %f[%i], %i : memref<8xi64, #npu.mem<ub>>
  func.return
}

// -----

// Valid: a workspace only launches of several blocks ask for (the same branch in every block).
// CHECK-LABEL: func.func @valid_shared_workspace_under_a_uniform_condition
// CHECK:         %ws = npu.alloc_shared(%nblk) : memref<?xi64>
func.func @valid_shared_workspace_under_a_uniform_condition() {
  %nblk = npu.block_dim
  %c1 = arith.constant 1 : index
  %several = arith.cmpi ugt, %nblk, %c1 : index
  scf.if %several {
    %ws = npu.alloc_shared(%nblk) : memref<?xi64>
  }
  func.return
}

// -----

func.func @shared_workspace_under_a_condition_of_the_block() {
  %bid = npu.block_idx
  %c0 = arith.constant 0 : index
  %first = arith.cmpi eq, %bid, %c0 : index
  scf.if %first {
    // expected-error@+1 {{'npu.alloc_shared' op is under an scf.if whose condition depends on npu.block_idx: blocks that skip it would not get the launch's buffer}}
    %ws = npu.alloc_shared() : memref<8xi64>
  }
  func.return
}
