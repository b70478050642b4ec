// The reduction loop of every GEMM micro-kernel (vectorize-contractions) is already register-
// blocked: its scf.for carries #llvm.loop_annotation<unroll = <disable = true>>, which the
// upstream lowering puts on the loop's back edge as !llvm.loop metadata, so LLVM's unrollers
// leave it one step long (the 6 x 2 block of an AVX2-class CPU: 12 FMAs per iteration) instead
// of copying it with a remainder loop. Every other loop keeps LLVM's unrolling.
// RUN: npugrad-opt %examples/flce_grad_fused.mlir --stage llvm-ir --cpu %inputs/avx2.toml | FileCheck %s

// CHECK-LABEL: define void @flce(
// CHECK-COUNT-12: call <8 x float> @llvm.fmuladd.v8f32(
// CHECK-NEXT:   %[[NEXT:.*]] = add i64 %[[K:[0-9]+]], 1
// CHECK-NEXT:   br label %{{[0-9]+}}, !llvm.loop ![[ROLLED:[0-9]+]]
// CHECK:      ![[ROLLED]] = distinct !{![[ROLLED]], ![[DISABLE:[0-9]+]]}
// CHECK-NEXT: ![[DISABLE]] = !{!"llvm.loop.unroll.disable"}

