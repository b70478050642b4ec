// High-performance mode in bf16: the given softmax tile replaces GEMM 1 (no exp), G is rounded
// to bf16 before GEMMs 2 and 3, which accumulate in float32 buffers of sizes BT×H and v×H
// (none depends on V = 384); the results are rounded once into the bf16 outputs.
// RUN: npugrad-opt %s --stage fused | FileCheck %s
// RUN: npugrad-opt %s --stage run | FileCheck %s --check-prefix=EXEC

// CHECK-LABEL: func.func @flce_hp_bf16
// CHECK:         memref.alloc() {{.*}} : memref<40x24xf32>
// CHECK:         memref.alloc() {{.*}} : memref<16x64xbf16>
// CHECK:         memref.alloc() {{.*}} : memref<64x24xf32>
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     math.exp
// CHECK-NOT:     GEMM 1
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK:             %[[P:.*]] = memref.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<40x384xf32>
// CHECK:             %[[G:.*]] = arith.mulf %{{.*}}, %[[P]] : f32
// CHECK:             arith.truncf %[[G]] : f32 to bf16
// CHECK:             linalg.generic {{.*}} doc = "GEMM 2: input grad tile dX_t += G * W_v"
// CHECK-NEXT:        ^bb0(%{{.*}}: bf16, %{{.*}}: bf16, %{{.*}}: f32):
// CHECK:             linalg.generic {{.*}} doc = "GEMM 3: weight grad tile dW_v += G^T * X_t"
// CHECK:           arith.truncf %{{.*}} : f32 to bf16
// CHECK:         } {train.fused = #train.fused<"train.fused_linear_cross_entropy_loss_grad", #train.tiles<bt = 16, v = 64>>}

// EXEC:      input_grad_out {{.*}} bfloat16 {{.*}} ok
// EXEC-NEXT: weight_grad_out {{.*}} bfloat16 {{.*}} ok
func.func @flce_hp_bf16(%g: memref<40xf32>, %x: memref<40x24xbf16>, %w: memref<384x24xbf16>, %mask: memref<5xui8>,
                        %t: memref<40xi64>, %p: memref<40x384xf32>, %gx: memref<40x24xbf16>, %gw: memref<384x24xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<40xf32>) input(%x : memref<40x24xbf16>)
      weight(%w : memref<384x24xbf16>) target_mask(%mask : memref<5xui8>) masked_target(%t : memref<40xi64>)
      softmax(%p : memref<40x384xf32>) -> input_grad_out(%gx : memref<40x24xbf16>) weight_grad_out(%gw : memref<384x24xbf16>)
      {tile_sizes = #train.tiles<bt = 16, v = 64>}
  func.return
}
