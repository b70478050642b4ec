// LLVM IR of nll_loss_backward: the zero fill (16 floats per store), then per sample one unsigned bounds compare and
// the ignore_index compare guarding the store of −w[y]·scale.
// RUN: npugrad-opt %examples/nll_loss_backward.mlir --stage llvm-ir --cpu %inputs/avx512.toml | FileCheck %s
// RUN: npugrad-opt %s --stage llvm-ir --cpu %inputs/avx512.toml | FileCheck %s --check-prefix=UI8

// CHECK:      define void @nll_loss_backward(ptr %{{.*}}, ptr %{{.*}}, i64 %{{.*}},
// CHECK:        store <16 x float> zeroinitializer, ptr %{{.*}}
// CHECK:        %[[SCALE:.*]] = fdiv float
// CHECK:        %[[NEG:.*]] = fneg float %[[SCALE]]
// CHECK:        %[[Y:.*]] = load i64, ptr
// CHECK:        %[[INB:.*]] = icmp ult i64 %[[Y]], 10
// CHECK:        %[[KEPT:.*]] = icmp ne i64 %[[Y]], -100
// CHECK:        %[[OK:.*]] = and i1 %[[KEPT]], %[[INB]]
// CHECK:        br i1 %[[OK]], label
// CHECK:        %[[P:.*]] = fmul float %{{.*}}, %[[NEG]]
// CHECK:        store float %[[P]], ptr
// CHECK:      define void @_mlir_ciface_nll_loss_backward(ptr %{{[0-9]+}}, ptr %{{[0-9]+}}, ptr %{{[0-9]+}},
// CHECK-SAME:   ptr %{{[0-9]+}}, ptr %{{[0-9]+}}, ptr %{{[0-9]+}})
// CHECK:        call void @nll_loss_backward(

// A uint8 target is zero-extended (200 stays class 200); the float32 product is rounded once to
// bf16 (to nearest even, in integer arithmetic) at the store.
// UI8:      define void @nll_sum_ui8_bf16(
// UI8:        %[[T:.*]] = load i8, ptr
// UI8:        %[[Y:.*]] = zext i8 %[[T]] to i64
// UI8:        icmp ult i64 %[[Y]], %{{.*}}
// UI8:        icmp ne i64 %[[Y]], 7
// UI8:        %[[P:.*]] = fmul float
// UI8:        bitcast float %[[P]] to i32
// UI8:        add i32 %{{.*}}, 32767
// UI8:        store bfloat
func.func @nll_sum_ui8_bf16(%g: memref<1xbf16>, %s: memref<?x?xbf16>, %t: memref<?xui8>, %w: memref<?xbf16>,
                            %tw: memref<1xbf16>, %o: memref<?x?xbf16>) {
  train.nll_loss_backward grad_output(%g : memref<1xbf16>) self(%s : memref<?x?xbf16>) target(%t : memref<?xui8>)
      weight(%w : memref<?xbf16>) total_weight(%tw : memref<1xbf16>) -> out(%o : memref<?x?xbf16>)
      {reduction = 2 : i64, ignore_index = 7 : i64}
  func.return
}
