// convert-train-to-loops on nll_loss_backward: a zero fill of out as one flat range (streamed
// past the caches when it is 8 MiB or more), then per sample the ignore_index compare and the
// bounds check guarding one store of −w[y]·scale; with out_zeroed, no fill.
// RUN: npugrad-opt %s --stage loops --no-distribute | FileCheck %s
// RUN: npugrad-opt %s -p convert-train-to-loops | FileCheck %s

// Reduction none, 2-D: per-sample upstream gradient; a uint8 target is zero-extended.
// CHECK-LABEL: func.func @nll_none_ui8_f16
// CHECK-NOT:     grad.
// CHECK-DAG:     %[[C1:.*]] = arith.constant 1 : index
// CHECK-DAG:     %[[C:.*]] = memref.dim %o, %[[C1]]
// CHECK-DAG:     %[[IGNORE:.*]] = arith.constant -100 : i64
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant 0.000000e+00 : f16
// CHECK:         %[[FLAT:.*]] = memref.collapse_shape %o {{\[\[}}0 : i64, 1 : i64]] : memref<?x?xf16> into memref<?xf16>
// CHECK:         %[[N:.*]] = memref.dim %[[FLAT]]
// CHECK:         %[[LARGE:.*]] = arith.cmpi uge, %[[N]], %{{.*}} : index
// CHECK:         scf.if %[[LARGE]] {
// CHECK:           vector.store %{{.*}}, %[[FLAT]][%{{.*}}] {alignment = 64 : i64, nontemporal = true} : memref<?xf16>, vector<32xf16>
// CHECK:         } else {
// CHECK-NEXT:      scf.for %[[I:.*]] = %{{.*}} to %[[N]] step %{{.*}} {
// CHECK-NEXT:        memref.store %[[ZERO]], %[[FLAT]][%[[I]]] : memref<?xf16>
// CHECK:         scf.for %[[N:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      %[[T:.*]] = memref.load %t[%[[N]]] : memref<?xui8>
// CHECK-NEXT:      %[[T8:.*]] = builtin.unrealized_conversion_cast %[[T]] : ui8 to i8
// CHECK-NEXT:      %[[Y:.*]] = arith.extui %[[T8]] : i8 to i64
// CHECK-NEXT:      %[[YI:.*]] = arith.index_cast %[[Y]] : i64 to index
// CHECK-NEXT:      %[[INB:.*]] = arith.cmpi ult, %[[YI]], %[[C]] : index
// CHECK-NEXT:      %[[KEPT:.*]] = arith.cmpi ne, %[[Y]], %[[IGNORE]] : i64
// CHECK-NEXT:      %[[OK:.*]] = arith.andi %[[KEPT]], %[[INB]] : i1
// CHECK-NEXT:      scf.if %[[OK]] {
// CHECK-NEXT:        %[[G:.*]] = memref.load %g[%[[N]]] : memref<?xf16>
// CHECK-NEXT:        %[[G32:.*]] = arith.extf %[[G]] : f16 to f32
// CHECK-NEXT:        %[[NEG:.*]] = arith.negf %[[G32]] : f32
// CHECK-NEXT:        %[[W:.*]] = memref.load %w[%[[YI]]] : memref<?xf16>
// CHECK-NEXT:        %[[W32:.*]] = arith.extf %[[W]] : f16 to f32
// CHECK-NEXT:        %[[P:.*]] = arith.mulf %[[W32]], %[[NEG]] : f32
// CHECK-NEXT:        %[[R:.*]] = arith.truncf %[[P]] : f32 to f16
// CHECK-NEXT:        memref.store %[[R]], %o[%[[N]], %[[YI]]] : memref<?x?xf16>
// CHECK-NEXT:      }
// CHECK-NEXT:    }
func.func @nll_none_ui8_f16(%g: memref<?xf16>, %s: memref<?x?xf16>, %t: memref<?xui8>, %w: memref<?xf16>,
                            %tw: memref<1xf16>, %o: memref<?x?xf16>) {
  train.nll_loss_backward grad_output(%g : memref<?xf16>) self(%s : memref<?x?xf16>) target(%t : memref<?xui8>)
      weight(%w : memref<?xf16>) total_weight(%tw : memref<1xf16>) -> out(%o : memref<?x?xf16>) {reduction = 0 : i64}
  func.return
}

// Mean, 1-D self with a 0-D int32 target: −grad_output/total_weight once, no sample loop, and
// an in-range ignore_index.
// CHECK-LABEL: func.func @nll_mean_1d_i32
// CHECK-DAG:     %[[IGNORE:.*]] = arith.constant 3 : i64
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      memref.store %[[ZERO]], %o[%[[I]]] : memref<7xf32>
// CHECK-NEXT:    }
// CHECK-NEXT:    %[[G:.*]] = memref.load %g[] : memref<f32>
// CHECK-NEXT:    %[[TW:.*]] = memref.load %tw[] : memref<f32>
// CHECK-NEXT:    %[[SCALE:.*]] = arith.divf %[[G]], %[[TW]] : f32
// CHECK-NEXT:    %[[NEG:.*]] = arith.negf %[[SCALE]] : f32
// CHECK-NEXT:    %[[T:.*]] = memref.load %t[] : memref<i32>
// CHECK-NEXT:    %[[Y:.*]] = arith.extsi %[[T]] : i32 to i64
// CHECK-NEXT:    %[[YI:.*]] = arith.index_cast %[[Y]] : i64 to index
// CHECK-NEXT:    %[[INB:.*]] = arith.cmpi ult, %[[YI]], %{{.*}} : index
// CHECK-NEXT:    %[[KEPT:.*]] = arith.cmpi ne, %[[Y]], %[[IGNORE]] : i64
// CHECK-NEXT:    %[[OK:.*]] = arith.andi %[[KEPT]], %[[INB]] : i1
// CHECK-NEXT:    scf.if %[[OK]] {
// CHECK-NEXT:      %[[W:.*]] = memref.load %w[%[[YI]]] : memref<7xf32>
// CHECK-NEXT:      %[[P:.*]] = arith.mulf %[[W]], %[[NEG]] : f32
// CHECK-NEXT:      memref.store %[[P]], %o[%[[YI]]] : memref<7xf32>
// CHECK-NEXT:    }
// CHECK-NOT:     scf.for
// CHECK:         func.return
func.func @nll_mean_1d_i32(%g: memref<f32>, %s: memref<7xf32>, %t: memref<i32>, %w: memref<7xf32>,
                           %tw: memref<f32>, %o: memref<7xf32>) {
  train.nll_loss_backward grad_output(%g : memref<f32>) self(%s : memref<7xf32>) target(%t : memref<i32>)
      weight(%w : memref<7xf32>) total_weight(%tw : memref<f32>) -> out(%o : memref<7xf32>) {ignore_index = 3 : i64}
  func.return
}

// out_zeroed (a fresh, zeroed out the API allocated): no fill at all, only the samples' stores.
// CHECK-LABEL: func.func @nll_zeroed_out
// CHECK-NOT:     memref.collapse_shape
// CHECK-NOT:     arith.constant 0.000000e+00
// CHECK:         scf.for %[[N:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      %[[T:.*]] = memref.load %t[%[[N]]] : memref<?xi64>
// CHECK:           scf.if %{{.*}} {
// CHECK:             memref.store %{{.*}}, %o[%[[N]], %{{.*}}] : memref<?x?xf32>
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NEXT:    func.return
func.func @nll_zeroed_out(%g: memref<f32>, %s: memref<?x?xf32>, %t: memref<?xi64>, %w: memref<?xf32>,
                          %tw: memref<f32>, %o: memref<?x?xf32>) {
  train.nll_loss_backward grad_output(%g : memref<f32>) self(%s : memref<?x?xf32>) target(%t : memref<?xi64>)
      weight(%w : memref<?xf32>) total_weight(%tw : memref<f32>) -> out(%o : memref<?x?xf32>) {out_zeroed = true}
  func.return
}
