// --stage run on apply_fused_ema_adam: random valid inputs (step >= 1, v > 0), the kernel updates
// var, m, v, s in place, and each is compared with the NumPy reference.
// RUN: npugrad-opt %examples/apply_fused_ema_adam.mlir --stage run --seed 1 | FileCheck %s
// RUN: npugrad-opt %s --stage run --seed 2 | FileCheck %s --check-prefix=RT

// CHECK: @apply_fused_ema_adam: compiled in {{.*}} ms, ran in {{.*}} ms
// CHECK: var {{ *}}(64, 48) {{ *}}bfloat16 {{.*}} ok
// CHECK: m {{ *}}(64, 48) {{ *}}bfloat16 {{.*}} ok
// CHECK: v {{ *}}(64, 48) {{ *}}bfloat16 {{.*}} ok
// CHECK: s {{ *}}(64, 48) {{ *}}bfloat16 {{.*}} ok

// Run-time hyper-parameters (an argument: the run stage fills it from the properties), Adam with
// L2 decay, no bias correction, float16 state of rank 3.
// RT: @adam_l2_f16
// RT: var {{ *}}(3, 5, 7) {{ *}}float16 {{.*}} ok
// RT: m {{ *}}(3, 5, 7) {{ *}}float16 {{.*}} ok
// RT: v {{ *}}(3, 5, 7) {{ *}}float16 {{.*}} ok
// RT: s {{ *}}(3, 5, 7) {{ *}}float16 {{.*}} ok
func.func @adam_l2_f16(%g: memref<3x5x7xf16>, %k: memref<1xi64>, %h: memref<6xf32>, %p: memref<3x5x7xf16>,
    %m: memref<3x5x7xf16>, %v: memref<3x5x7xf16>, %s: memref<3x5x7xf16>) {
  train.apply_fused_ema_adam grad(%g : memref<3x5x7xf16>) step(%k : memref<1xi64>) hyperparameters(%h : memref<6xf32>)
      -> var(%p : memref<3x5x7xf16>) m(%m : memref<3x5x7xf16>) v(%v : memref<3x5x7xf16>) s(%s : memref<3x5x7xf16>)
      {lr = 0.05 : f64, ema_decay = 0.9 : f64, mode = 0 : i64, bias_correction = false, weight_decay = 0.1 : f64}
  func.return
}
