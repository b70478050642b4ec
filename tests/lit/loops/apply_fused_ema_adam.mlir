// convert-train-to-loops on apply_fused_ema_adam: the per-call scalars (1 - β, c = 1 - β^k with a
// float32 power of the step) before one loop nest that reads grad, var, m, v, s once each and
// stores var', m', v', s' once each, rounded to the stored type.
// RUN: npugrad-opt %s --stage loops --no-distribute | FileCheck %s
// RUN: npugrad-opt %s -p convert-train-to-loops | FileCheck %s

// Properties as constants; AdamW (mode 1) with bias correction, bf16 state, dynamic shape.
// CHECK-LABEL: func.func @adamw_bf16_constants
// CHECK-NOT:     grad.
// CHECK-DAG:     %[[LR:.*]] = arith.constant 1.000000e-02 : f32
// CHECK-DAG:     %[[B1:.*]] = arith.constant 9.000000e-01 : f32
// CHECK-DAG:     %[[B2:.*]] = arith.constant 9.500000e-01 : f32
// CHECK-DAG:     %[[EPS:.*]] = arith.constant 1.000000e-08 : f32
// CHECK-DAG:     %[[WD:.*]] = arith.constant 1.000000e-01 : f32
// CHECK-DAG:     %[[ONE:.*]] = arith.constant 1.000000e+00 : f32
// CHECK-NOT:     memref.load %{{.*}} : memref<6xf32>
// CHECK:         %[[K:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<1xi64>
// CHECK:         %[[KF:.*]] = arith.sitofp %[[K]] : i64 to f32
// CHECK:         %[[P1:.*]] = math.powf %[[B1]], %[[KF]] : f32
// CHECK:         %[[C1:.*]] = arith.subf %[[ONE]], %[[P1]] : f32
// CHECK:         %[[P2:.*]] = math.powf %[[B2]], %[[KF]] : f32
// CHECK:         %[[C2:.*]] = arith.subf %[[ONE]], %[[P2]] : f32
// CHECK:         scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NOT:         math.powf
// CHECK:             memref.load %g[%[[I]], %[[J]]] : memref<?x3xbf16>
// CHECK:             %[[PL:.*]] = memref.load %p[%[[I]], %[[J]]] : memref<?x3xbf16>
// CHECK-NEXT:        %[[P0:.*]] = arith.extf %[[PL]] : bf16 to f32
// CHECK:             %[[M:.*]] = arith.addf
// CHECK:             %[[V:.*]] = arith.addf
// CHECK-NEXT:        %[[MH:.*]] = arith.divf %[[M]], %[[C1]] : f32
// CHECK-NEXT:        %[[VH:.*]] = arith.divf %[[V]], %[[C2]] : f32
// CHECK-NEXT:        %[[R:.*]] = math.sqrt %[[VH]] : f32
// CHECK-NEXT:        %[[DEN:.*]] = arith.addf %[[R]], %[[EPS]] : f32
// CHECK-NEXT:        %[[Q:.*]] = arith.divf %[[MH]], %[[DEN]] : f32
// CHECK-NEXT:        %[[DECAY:.*]] = arith.mulf %[[WD]], %[[P0]] : f32
// CHECK-NEXT:        %[[U:.*]] = arith.addf %[[Q]], %[[DECAY]] : f32
// CHECK-NEXT:        %[[STEP:.*]] = arith.mulf %[[LR]], %[[U]] : f32
// CHECK-NEXT:        %[[P:.*]] = arith.subf %[[P0]], %[[STEP]] : f32
// CHECK:             %[[S:.*]] = arith.addf
// CHECK:             %[[PR:.*]] = arith.truncf %[[P]] : f32 to bf16
// CHECK-NEXT:        memref.store %[[PR]], %{{.*}}[%[[I]], %[[J]]] : memref<?x3xbf16>
// CHECK-NEXT:        %[[MR:.*]] = arith.truncf %[[M]] : f32 to bf16
// CHECK-NEXT:        memref.store %[[MR]], %{{.*}}[%[[I]], %[[J]]] : memref<?x3xbf16>
// CHECK-NEXT:        %[[VR:.*]] = arith.truncf %[[V]] : f32 to bf16
// CHECK-NEXT:        memref.store %[[VR]], %{{.*}}[%[[I]], %[[J]]] : memref<?x3xbf16>
// CHECK-NEXT:        %[[SR:.*]] = arith.truncf %[[S]] : f32 to bf16
// CHECK-NEXT:        memref.store %[[SR]], %{{.*}}[%[[I]], %[[J]]] : memref<?x3xbf16>
// CHECK-NEXT:      }
// CHECK-NEXT:    }
// CHECK-NOT:     scf.for
// CHECK:         func.return
func.func @adamw_bf16_constants(%g: memref<?x3xbf16>, %k: memref<1xi64>, %p: memref<?x3xbf16>,
    %m: memref<?x3xbf16>, %v: memref<?x3xbf16>, %s: memref<?x3xbf16>) {
  train.apply_fused_ema_adam grad(%g : memref<?x3xbf16>) step(%k : memref<1xi64>)
      -> var(%p : memref<?x3xbf16>) m(%m : memref<?x3xbf16>) v(%v : memref<?x3xbf16>) s(%s : memref<?x3xbf16>)
      {lr = 0.01 : f64, beta2 = 0.95 : f64, weight_decay = 0.1 : f64}
  func.return
}

// Run-time hyper-parameters, loaded once before the loop in the order [lr, ema_decay, beta1,
// beta2, eps, weight_decay]; the properties are then not used. Adam with L2 (mode 0): the decay
// joins the gradient first. f16 state of any layout.
// CHECK-LABEL: func.func @adam_l2_f16_runtime
// CHECK-NOT:     arith.constant 1.000000e-03 : f32
// CHECK-DAG:     %[[LR:.*]] = memref.load %[[H:.*]][%[[I0:.*]]] : memref<6xf32>
// CHECK-DAG:     %[[D:.*]] = memref.load %[[H]][%[[I1:.*]]] : memref<6xf32>
// CHECK-DAG:     %[[B1:.*]] = memref.load %[[H]][%[[I2:.*]]] : memref<6xf32>
// CHECK-DAG:     %[[B2:.*]] = memref.load %[[H]][%[[I3:.*]]] : memref<6xf32>
// CHECK-DAG:     %[[EPS:.*]] = memref.load %[[H]][%[[I4:.*]]] : memref<6xf32>
// CHECK-DAG:     %[[WD:.*]] = memref.load %[[H]][%[[I5:.*]]] : memref<6xf32>
// CHECK-DAG:     %[[I0]] = arith.constant 0 : index
// CHECK-DAG:     %[[I5]] = arith.constant 5 : index
// CHECK-DAG:     %[[OMD:.*]] = arith.subf %{{.*}}, %[[D]] : f32
// CHECK-DAG:     math.powf %[[B1]], %{{.*}} : f32
// CHECK-DAG:     math.powf %[[B2]], %{{.*}} : f32
// CHECK:         scf.for
// CHECK-NOT:       memref<6xf32>
// CHECK:           %[[G:.*]] = arith.extf %{{.*}} : f16 to f32
// CHECK:           %[[P:.*]] = arith.extf %{{.*}} : f16 to f32
// CHECK-NEXT:      %[[L2:.*]] = arith.mulf %[[WD]], %[[P]] : f32
// CHECK-NEXT:      %[[GH:.*]] = arith.addf %[[G]], %[[L2]] : f32
// CHECK:           math.sqrt
// CHECK-NEXT:      %[[DEN:.*]] = arith.addf %{{.*}}, %[[EPS]] : f32
// CHECK-NEXT:      %[[U:.*]] = arith.divf %{{.*}}, %[[DEN]] : f32
// CHECK-NEXT:      arith.mulf %[[LR]], %[[U]] : f32
// CHECK:           arith.mulf %[[OMD]], %{{.*}} : f32
// CHECK:           arith.truncf %{{.*}} : f32 to f16
// CHECK-NEXT:      memref.store %{{.*}}, %p[
// CHECK-NEXT:      arith.truncf %{{.*}} : f32 to f16
// CHECK-NEXT:      memref.store %{{.*}}, %m[
// CHECK-NEXT:      arith.truncf %{{.*}} : f32 to f16
// CHECK-NEXT:      memref.store %{{.*}}, %v[
// CHECK-NEXT:      arith.truncf %{{.*}} : f32 to f16
// CHECK-NEXT:      memref.store %{{.*}}, %s[
// CHECK-NOT:     memref.store
// CHECK:         func.return
!state = memref<?x?xf16, strided<[?, ?], offset: ?>>
func.func @adam_l2_f16_runtime(%g: !state, %k: memref<1xi64>, %h: memref<6xf32>, %p: !state, %m: !state,
    %v: !state, %s: !state) {
  train.apply_fused_ema_adam grad(%g : !state) step(%k : memref<1xi64>) hyperparameters(%h : memref<6xf32>)
      -> var(%p : !state) m(%m : !state) v(%v : !state) s(%s : !state) {mode = 0 : i64}
  func.return
}

// Without bias correction c1 = c2 = 1: no power, no step load, no division by c.
// CHECK-LABEL: func.func @no_bias_correction_f32
// CHECK-NOT:     math.powf
// CHECK-NOT:     memref.load %k
// CHECK:         scf.for
// CHECK:           math.sqrt
// CHECK-NEXT:      arith.addf
// CHECK-NEXT:      arith.divf
// CHECK-NOT:       arith.divf
// CHECK-NOT:       arith.truncf
// CHECK-COUNT-4:   memref.store %{{.*}} : memref<8xf32>
func.func @no_bias_correction_f32(%g: memref<8xf32>, %k: memref<1xi64>, %p: memref<8xf32>, %m: memref<8xf32>,
    %v: memref<8xf32>, %s: memref<8xf32>) {
  train.apply_fused_ema_adam grad(%g : memref<8xf32>) step(%k : memref<1xi64>)
      -> var(%p : memref<8xf32>) m(%m : memref<8xf32>) v(%v : memref<8xf32>) s(%s : memref<8xf32>)
      {bias_correction = false}
  func.return
}
