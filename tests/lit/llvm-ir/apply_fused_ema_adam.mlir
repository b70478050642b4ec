// LLVM IR as translated by the upstream bindings: the two float32 powers β^k of the step, hoisted
// above the loop, then plain (uncontracted) float arithmetic and four bfloat stores, 16 elements
// at a time (48 columns: three vector steps per row, no remainder).
// RUN: npugrad-opt %examples/apply_fused_ema_adam.mlir --stage llvm-ir --cpu %inputs/avx512.toml | FileCheck %s

// CHECK:      define void @apply_fused_ema_adam(ptr %{{.*}}, ptr %{{.*}}, i64 %{{.*}},
// CHECK:        %[[K:.*]] = load i64, ptr %{{.*}}
// CHECK-NEXT:   %[[KF:.*]] = sitofp i64 %[[K]] to float
// CHECK-NEXT:   call float @llvm.pow.f32(float {{.*}}, float %[[KF]])
// CHECK:        call float @llvm.pow.f32(float {{.*}}, float %[[KF]])
// CHECK:        br label
// CHECK-NOT:    @llvm.pow.f32
// CHECK-NOT:    {{fast|contract|fmuladd|fma}}
// CHECK:        call <16 x float> @llvm.sqrt.v16f32(<16 x float> %{{.*}})
// CHECK:        fdiv <16 x float>
// CHECK-COUNT-4: store <16 x bfloat>
// CHECK-NOT:    store
// CHECK:      define void @_mlir_ciface_apply_fused_ema_adam(ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}})
// CHECK:        call void @apply_fused_ema_adam(
