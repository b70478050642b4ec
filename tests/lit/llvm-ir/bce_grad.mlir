// LLVM IR as translated by the upstream bindings: the kernel and its C-interface wrapper.
// RUN: npugrad-opt %examples/bce_grad.mlir --stage llvm-ir --cpu %inputs/avx512.toml | FileCheck %s

// CHECK:      define void @bce_grad(ptr %{{.*}}, ptr %{{.*}}, i64 %{{.*}}, i64 %{{.*}}, i64 %{{.*}},
// CHECK:        call float @llvm.maximum.f32(float %{{.*}}, float {{.*}})
// CHECK:        fdiv float
// CHECK:        store float
// CHECK:      define void @_mlir_ciface_bce_grad(ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}})
// CHECK:        call void @bce_grad(
