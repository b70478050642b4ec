// convert-train-to-loops on fused_linear_cross_entropy_loss_grad (the unfused reference lowering;
// the default pipeline fuses first): per token t and vocabulary row v, G = g·(P − one-hot) in
// float32, rounded to the input dtype, then scattered into both GEMMs' float32 accumulators.
// RUN: npugrad-opt %s -p convert-train-to-loops | FileCheck %s

// Memory-saving mode, bf16, bit-packed mask: P = exp(x·w − max)/sum, the mask bit is
// (byte[t/8] >> t%8) & 1, G goes through bf16, accumulators are allocated and rounded once.
// CHECK-LABEL: func.func @memory_saving_bf16_packed
// CHECK-NOT:     grad.
// CHECK-DAG:     %[[C8:.*]] = arith.constant 8 : index
// CHECK-DAG:     %[[ONE_I8:.*]] = arith.constant 1 : i8
// CHECK-DAG:     %[[ZERO_I8:.*]] = arith.constant 0 : i8
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK-DAG:     %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK:         %[[AX:.*]] = memref.alloc(%{{.*}}, %{{.*}}) {{.*}} : memref<?x?xf32>
// CHECK:         %[[AW:.*]] = memref.alloc(%{{.*}}, %{{.*}}) {{.*}} : memref<?x?xf32>
// Accumulators are zeroed as flat ranges (see loops/nll_loss_backward.mlir).
// CHECK:         %[[AXF:.*]] = memref.collapse_shape %[[AX]]
// CHECK:         memref.store %[[ZERO]], %[[AXF]]
// CHECK:         %[[AWF:.*]] = memref.collapse_shape %[[AW]]
// CHECK:         memref.store %[[ZERO]], %[[AWF]]
// CHECK:         } else {
// CHECK-NEXT:      scf.for
// CHECK-NEXT:        memref.store %[[ZERO]], %[[AWF]]
// CHECK:         scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      %[[G:.*]] = memref.load %{{.*}}[%[[T]]] : memref<?xf32>
// CHECK-NEXT:      %[[MAX:.*]] = memref.load %{{.*}}[%[[T]]] : memref<?xf32>
// CHECK-NEXT:      %[[SUM:.*]] = memref.load %{{.*}}[%[[T]]] : memref<?xf32>
// CHECK-NEXT:      %[[BYTE_I:.*]] = arith.divui %[[T]], %[[C8]] : index
// CHECK-NEXT:      %[[BYTE_U:.*]] = memref.load %{{.*}}[%[[BYTE_I]]] : memref<?xui8>
// CHECK-NEXT:      %[[BYTE:.*]] = builtin.unrealized_conversion_cast %[[BYTE_U]] : ui8 to i8
// CHECK-NEXT:      %[[BIT_I:.*]] = arith.remui %[[T]], %[[C8]] : index
// CHECK-NEXT:      %[[SHIFT:.*]] = arith.index_cast %[[BIT_I]] : index to i8
// CHECK-NEXT:      %[[SHIFTED:.*]] = arith.shrui %[[BYTE]], %[[SHIFT]] : i8
// CHECK-NEXT:      %[[BIT:.*]] = arith.andi %[[SHIFTED]], %[[ONE_I8]] : i8
// CHECK-NEXT:      %[[MINE:.*]] = arith.cmpi eq, %[[BIT]], %[[ZERO_I8]] : i8
// CHECK-NEXT:      %[[J32:.*]] = memref.load %{{.*}}[%[[T]]] : memref<?xi32>
// CHECK-NEXT:      %[[J:.*]] = arith.index_cast %[[J32]] : i32 to index
// CHECK-NEXT:      scf.for %[[V:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[DOT:.*]] = scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(%[[PART:.*]] = %[[ZERO]]) -> (f32) {
// CHECK:               %[[XW:.*]] = arith.mulf
// CHECK-NEXT:          %[[NEXT:.*]] = arith.addf %[[PART]], %[[XW]] : f32
// CHECK-NEXT:          scf.yield %[[NEXT]] : f32
// CHECK-NEXT:        }
// CHECK-NEXT:        %[[Z:.*]] = arith.subf %[[DOT]], %[[MAX]] : f32
// CHECK-NEXT:        %[[E:.*]] = math.exp %[[Z]] : f32
// CHECK-NEXT:        %[[P:.*]] = arith.divf %[[E]], %[[SUM]] : f32
// CHECK-NEXT:        %[[IS_J:.*]] = arith.cmpi eq, %[[V]], %[[J]] : index
// CHECK-NEXT:        %[[HIT:.*]] = arith.andi %[[MINE]], %[[IS_J]] : i1
// CHECK-NEXT:        %[[HOT:.*]] = arith.select %[[HIT]], %[[ONE]], %[[ZERO]] : f32
// CHECK-NEXT:        %[[PH:.*]] = arith.subf %[[P]], %[[HOT]] : f32
// CHECK-NEXT:        %[[G32:.*]] = arith.mulf %[[G]], %[[PH]] : f32
// CHECK-NEXT:        %[[GBF:.*]] = arith.truncf %[[G32]] : f32 to bf16
// CHECK-NEXT:        %[[GR:.*]] = arith.extf %[[GBF]] : bf16 to f32
// CHECK-NEXT:        scf.for %[[H:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:          %[[WB:.*]] = memref.load %{{.*}}[%[[V]], %[[H]]] : memref<?x?xbf16>
// CHECK-NEXT:          %[[W:.*]] = arith.extf %[[WB]] : bf16 to f32
// CHECK-NEXT:          %[[GW:.*]] = arith.mulf %[[GR]], %[[W]] : f32
// CHECK-NEXT:          %[[OX:.*]] = memref.load %[[AX]][%[[T]], %[[H]]] : memref<?x?xf32>
// CHECK-NEXT:          %[[NX:.*]] = arith.addf %[[OX]], %[[GW]] : f32
// CHECK-NEXT:          memref.store %[[NX]], %[[AX]][%[[T]], %[[H]]] : memref<?x?xf32>
// CHECK-NEXT:          %[[XB:.*]] = memref.load %{{.*}}[%[[T]], %[[H]]] : memref<?x?xbf16>
// CHECK-NEXT:          %[[X:.*]] = arith.extf %[[XB]] : bf16 to f32
// CHECK-NEXT:          %[[GX:.*]] = arith.mulf %[[GR]], %[[X]] : f32
// CHECK-NEXT:          %[[OW:.*]] = memref.load %[[AW]][%[[V]], %[[H]]] : memref<?x?xf32>
// CHECK-NEXT:          %[[NW:.*]] = arith.addf %[[OW]], %[[GX]] : f32
// CHECK-NEXT:          memref.store %[[NW]], %[[AW]][%[[V]], %[[H]]] : memref<?x?xf32>
// CHECK-NEXT:        }
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK:         %[[RX:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:    memref.store %[[RX]], %{{.*}} : memref<?x?xbf16>
// CHECK:         memref.dealloc %[[AX]]
// CHECK:         %[[RW:.*]] = arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:    memref.store %[[RW]], %{{.*}} : memref<?x?xbf16>
// CHECK:         memref.dealloc %[[AW]]
// CHECK-NEXT:    func.return
func.func @memory_saving_bf16_packed(%g: memref<?xf32>, %x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %m: memref<?xui8>,
                                     %t: memref<?xi32>, %lm: memref<?xf32>, %se: memref<?xf32>,
                                     %dx: memref<?x?xbf16>, %dw: memref<?x?xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<?xf32>) input(%x : memref<?x?xbf16>) weight(%w : memref<?x?xbf16>)
      target_mask(%m : memref<?xui8>) masked_target(%t : memref<?xi32>)
      logits_max(%lm : memref<?xf32>) sum_exp_logits(%se : memref<?xf32>)
      -> input_grad_out(%dx : memref<?x?xbf16>) weight_grad_out(%dw : memref<?x?xbf16>)
  func.return
}

// High-performance mode, float32, bool mask: P is read from softmax (no exp, no dot product),
// G is not rounded, and the float32 outputs are their own accumulators (no allocation).
// CHECK-LABEL: func.func @high_performance_f32_bool
// CHECK-NOT:     memref.alloc
// CHECK:         memref.collapse_shape %dx {{.*}} : memref<8x5xf32> into memref<40xf32>
// CHECK:         memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<40xf32>
// CHECK:         memref.collapse_shape %dw {{.*}} : memref<130x5xf32> into memref<650xf32>
// CHECK:         memref.store %{{.*}}, %{{.*}}[%{{.*}}] : memref<650xf32>
// CHECK:         scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           %[[M:.*]] = memref.load %{{.*}}[%[[T]]] : memref<8xi1>
// CHECK-NEXT:      %[[MINE:.*]] = arith.cmpi eq, %[[M]], %{{.*}} : i1
// CHECK:           scf.for %[[V:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %[[P:.*]] = memref.load %{{.*}}[%[[T]], %[[V]]] : memref<8x130xf32>
// CHECK-NOT:         math.exp
// CHECK-NOT:         arith.truncf
// CHECK:             %[[G:.*]] = arith.mulf %{{.*}}, %{{.*}} : f32
// CHECK-NEXT:        scf.for %[[H:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:               memref.store %{{.*}}, %dx[%[[T]], %[[H]]] : memref<8x5xf32>
// CHECK:               memref.store %{{.*}}, %dw[%[[V]], %[[H]]] : memref<130x5xf32>
// CHECK-NOT:     memref.dealloc
// CHECK:         func.return
func.func @high_performance_f32_bool(%g: memref<8xf32>, %x: memref<8x5xf32>, %w: memref<130x5xf32>, %m: memref<8xi1>,
                                     %t: memref<8xi64>, %p: memref<8x130xf32>,
                                     %dx: memref<8x5xf32>, %dw: memref<130x5xf32>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<8xf32>) input(%x : memref<8x5xf32>) weight(%w : memref<130x5xf32>)
      target_mask(%m : memref<8xi1>) masked_target(%t : memref<8xi64>) softmax(%p : memref<8x130xf32>)
      -> input_grad_out(%dx : memref<8x5xf32>) weight_grad_out(%dw : memref<130x5xf32>)
  func.return
}
