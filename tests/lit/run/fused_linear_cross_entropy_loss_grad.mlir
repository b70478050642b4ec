// --stage run on random valid operands (statistics, targets in range, ~30% of rows masked),
// both modes, checked against the NumPy reference.
// RUN: npugrad-opt %examples/flce_grad.mlir --stage run --seed 1 | FileCheck %s
// RUN: npugrad-opt %s --stage run --entry high_performance_f16 | FileCheck %s --check-prefix=HP

// CHECK: @flce_grad: compiled in {{.*}} ms, ran in {{.*}} ms
// CHECK: input_grad_out {{ *}}(16, 32) {{ *}}bfloat16 {{.*}} ok
// CHECK: weight_grad_out {{ *}}(256, 32) {{ *}}bfloat16 {{.*}} ok

// HP: @high_performance_f16
// HP: input_grad_out {{ *}}(21, 13) {{ *}}float16 {{.*}} ok
// HP: weight_grad_out {{ *}}(131, 13) {{ *}}float16 {{.*}} ok
func.func @high_performance_f16(%g: memref<21xf32>, %x: memref<21x13xf16>, %w: memref<131x13xf16>, %m: memref<21xi1>,
                                %t: memref<21xi32>, %p: memref<21x131xf32>,
                                %dx: memref<21x13xf16>, %dw: memref<131x13xf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<21xf32>) input(%x : memref<21x13xf16>) weight(%w : memref<131x13xf16>)
      target_mask(%m : memref<21xi1>) masked_target(%t : memref<21xi32>) softmax(%p : memref<21x131xf32>)
      -> input_grad_out(%dx : memref<21x13xf16>) weight_grad_out(%dw : memref<131x13xf16>)
  func.return
}

// The unfused reference lowering, run and checked the same way.
// RUN: npugrad-opt %examples/flce_grad.mlir --no-fuse --stage run | FileCheck %s --check-prefix=UNFUSED
// RUN: npugrad-opt %examples/flce_grad.mlir --no-fuse --stage loops | FileCheck %s --check-prefix=UNFUSED-LOOPS
// UNFUSED:      input_grad_out {{.*}} ok
// UNFUSED-NEXT: weight_grad_out {{.*}} ok
// UNFUSED-LOOPS-NOT: linalg.generic
// UNFUSED-LOOPS: math.exp

// `accumulate` (out += grad): the outputs start from random values, and the reference adds the
// gradients to them (not to zeros, not to the NaN an unwritten output holds), fused and unfused,
// bfloat16 and float32 outputs.
// RUN: npugrad-opt %s --stage run --entry accumulate_bf16 | FileCheck %s --check-prefix=ACC
// RUN: npugrad-opt %s --stage run --entry accumulate_bf16 --no-fuse | FileCheck %s --check-prefix=ACC
// RUN: npugrad-opt %s --stage run --entry accumulate_f32 | FileCheck %s --check-prefix=ACC32
// ACC:        input_grad_out {{ *}}(40, 24) {{ *}}bfloat16 {{.*}} ok
// ACC-NEXT:   weight_grad_out {{ *}}(384, 24) {{ *}}bfloat16 {{.*}} ok
// ACC32:      input_grad_out {{ *}}(40, 24) {{ *}}float32 {{.*}} ok
// ACC32-NEXT: weight_grad_out {{ *}}(384, 24) {{ *}}float32 {{.*}} ok
func.func @accumulate_bf16(%g: memref<40xf32>, %x: memref<40x24xbf16>, %w: memref<384x24xbf16>, %mask: memref<5xui8>,
                           %t: memref<40xi64>, %lm: memref<40xf32>, %se: memref<40xf32>,
                           %gx: memref<40x24xbf16>, %gw: memref<384x24xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<40xf32>) input(%x : memref<40x24xbf16>)
      weight(%w : memref<384x24xbf16>) target_mask(%mask : memref<5xui8>) masked_target(%t : memref<40xi64>)
      logits_max(%lm : memref<40xf32>) sum_exp_logits(%se : memref<40xf32>)
      -> input_grad_out(%gx : memref<40x24xbf16>) weight_grad_out(%gw : memref<384x24xbf16>) {accumulate = true}
  func.return
}
func.func @accumulate_f32(%g: memref<40xf32>, %x: memref<40x24xf32>, %w: memref<384x24xf32>, %mask: memref<5xui8>,
                          %t: memref<40xi64>, %lm: memref<40xf32>, %se: memref<40xf32>,
                          %gx: memref<40x24xf32>, %gw: memref<384x24xf32>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<40xf32>) input(%x : memref<40x24xf32>)
      weight(%w : memref<384x24xf32>) target_mask(%mask : memref<5xui8>) masked_target(%t : memref<40xi64>)
      logits_max(%lm : memref<40xf32>) sum_exp_logits(%se : memref<40xf32>)
      -> input_grad_out(%gx : memref<40x24xf32>) weight_grad_out(%gw : memref<384x24xf32>) {accumulate = true}
  func.return
}
