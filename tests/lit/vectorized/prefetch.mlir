// memref.prefetch, the upstream op the pinned xDSL lacks (npugrad/dialect/upstream.py): printed in
// upstream's syntax, read back by npugrad-opt and by upstream MLIR (the bindings; Debian's
// mlir-opt-22 in tests/test_upstream_tools.py), and lowered to llvm.prefetch. What its verifier
// rejects: prefetch-invalid.mlir.
// RUN: npugrad-opt %s | FileCheck %s
// RUN: npugrad-opt %s | npugrad-opt | FileCheck %s
// RUN: npugrad-opt %s --stage llvm-ir --no-distribute | FileCheck %s --check-prefix=LLVM

// CHECK-LABEL: func.func @prefetch
// CHECK-NEXT:    memref.prefetch %c[%i, %j], write, locality<3>, data : memref<?x64xf32>
// CHECK-NEXT:    memref.prefetch %c[%j, %i], read, locality<0>, instr : memref<?x64xf32>
// LLVM-LABEL: define void @prefetch
// LLVM:         call void @llvm.prefetch.p0(ptr %{{.*}}, i32 1, i32 3, i32 1)
// LLVM:         call void @llvm.prefetch.p0(ptr %{{.*}}, i32 0, i32 0, i32 0)
func.func @prefetch(%c: memref<?x64xf32>, %i: index, %j: index) {
  memref.prefetch %c[%i, %j], write, locality<3>, data : memref<?x64xf32>
  memref.prefetch %c[%j, %i], read, locality<0>, instr : memref<?x64xf32>
  func.return
}
