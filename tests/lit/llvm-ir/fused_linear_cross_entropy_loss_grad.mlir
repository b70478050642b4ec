// LLVM IR of the unfused reference lowering of the example: heap accumulators (16×32 and 256×32
// float32, plus alignment slack; the runtime's allocation functions, machine_code.ALLOC_IR), the mask bit shift, exp of the recomputed logit (npugrad's, not libm's), G rounded to
// bf16 in integer arithmetic (round to nearest even), and the C-interface wrapper. The zero
// fills, the accumulations into dX/dW and their final rounding are vector loops (16 lanes).
// RUN: npugrad-opt %examples/flce_grad.mlir -p convert-train-to-loops --stage llvm-ir --cpu %inputs/avx512.toml | FileCheck %s

// CHECK:      declare void @_mlir_memref_to_llvm_free(ptr)
// CHECK:      declare ptr @_mlir_memref_to_llvm_alloc(i64)
// CHECK:      define void @flce_grad(ptr %{{.*}}, ptr %{{.*}}, i64 %{{.*}}, i64 %{{.*}}, i64 %{{.*}},
// CHECK:        call ptr @_mlir_memref_to_llvm_alloc(i64 2112)
// CHECK:        call ptr @_mlir_memref_to_llvm_alloc(i64 32832)
// CHECK:        %[[BYTE:.*]] = load i8, ptr %{{.*}}
// CHECK:        lshr i8 %[[BYTE]], %{{.*}}
// CHECK:        %[[E:.*]] = call float @npugrad.exp.f32(float %{{.*}})
// CHECK-NEXT:   fdiv float %[[E]], %{{.*}}
// CHECK:        add i32 %{{.*}}, 32767
// CHECK:        bitcast i16 %{{.*}} to bfloat
// CHECK:        fadd <16 x float>
// CHECK:        store <16 x float>
// CHECK:        fadd <16 x float>
// CHECK:        store <16 x float>
// CHECK:        add <16 x i32> %{{.*}}, splat (i32 32767)
// CHECK:        store <16 x bfloat>
// CHECK:        call void @_mlir_memref_to_llvm_free(
// CHECK:        store <16 x bfloat>
// CHECK:        call void @_mlir_memref_to_llvm_free(
// CHECK:      define void @_mlir_ciface_flce_grad(ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}})
// CHECK:        call void @flce_grad(
// exp is npugrad's own code (lowering/vector_math.py), not a libm call.
// CHECK:      define internal float @npugrad.exp.f32(float %x)
// CHECK-NOT:  @llvm.exp
