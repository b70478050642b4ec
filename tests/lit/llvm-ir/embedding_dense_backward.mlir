// LLVM IR of the embedding gradient: heap scratch for the counting sort (the runtime's allocation
// functions: malloc, huge pages advised for a large one), sign-extended i32
// indices bounded by one unsigned compare plus the padding compare, the float32 sums
// (frequency-scaled), and the scratch freed.
// RUN: npugrad-opt %examples/embedding_dense_backward.mlir --stage llvm-ir --cpu %inputs/avx512.toml | FileCheck %s

// CHECK:      define void @embedding_dense_backward(ptr %{{.*}}, ptr %{{.*}}, i64 %{{.*}}, i64 %{{.*}},
// CHECK:        call ptr @_mlir_memref_to_llvm_alloc(i64 {{[0-9]+}})
// CHECK:        call ptr @_mlir_memref_to_llvm_alloc(i64 {{[0-9]+}})
// CHECK:        %[[K:.*]] = sext i32 %{{.*}} to i64
// CHECK-NEXT:   icmp ult i64 %[[K]], 50
// CHECK-NEXT:   icmp ne i64 %[[K]], 0
// Along the embedding dimension, 16 floats at a time: a bucket's first row, scaled and added to
// zero (kept: 0 + -0 is +0, as in the reference's sum), an empty bucket's zeros, then the
// scaled sums of the bucket's other rows.
// CHECK:        %[[CNT:.*]] = sitofp i64 %{{.*}} to float
// CHECK:        %[[S0:.*]] = fdiv <16 x float> %{{.*}}, %{{.*}}
// CHECK-NEXT:   fadd <16 x float> %[[S0]], zeroinitializer
// CHECK:        store <16 x float> zeroinitializer
// CHECK:        %[[S:.*]] = fdiv <16 x float> %{{.*}}, %{{.*}}
// CHECK:        fadd <16 x float> %{{.*}}, %[[S]]
// CHECK:        call void @_mlir_memref_to_llvm_free(
// CHECK:        call void @_mlir_memref_to_llvm_free(
// CHECK:      define void @_mlir_ciface_embedding_dense_backward(ptr %{{.*}}, ptr %{{.*}}, ptr %{{.*}})
// CHECK:        call void @embedding_dense_backward(
