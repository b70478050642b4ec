// High-performance mode in bf16: the given softmax tile replaces GEMM 1 (no exp), G is rounded
// to bf16 before GEMMs 2 and 3, which accumulate in float32 buffers of sizes BT×H and v×H
// (none depends on V = 384); the results are rounded once into the bf16 outputs. The pass alone
// keeps G in a bf16 tile (what a target's matrix unit reads); the untiled pipeline sets
// `wide_grad`: the same rounded values in a float32 tile, which the CPU's micro-kernels broadcast
// without widening each; but for a CPU that multiplies bfloat16 pairs (AVX512-BF16) it keeps G
// in bf16, which GEMMs 2 and 3 then read as they do W and X.
// RUN: npugrad-opt %s -p fuse-linear-cross-entropy-grad | FileCheck %s --check-prefixes=CHECK,NARROW
// RUN: npugrad-opt %s --stage fused --cpu %inputs/avx512.toml | FileCheck %s --check-prefixes=CHECK,WIDE
// RUN: npugrad-opt %s --stage fused --cpu %inputs/avx512bf16.toml | FileCheck %s --check-prefixes=CHECK,NARROW
// RUN: npugrad-opt %s --stage run | FileCheck %s --check-prefix=EXEC

// CHECK-LABEL: func.func @flce_hp_bf16
// CHECK:         memref.alloc() {{.*}} : memref<40x24xf32>
// NARROW:        memref.alloc() {{.*}} : memref<16x64xbf16>
// WIDE:          memref.alloc() {{.*}} : memref<16x64xf32>
// CHECK:         memref.alloc() {{.*}} : memref<64x24xf32>
// CHECK-NOT:     memref.alloc
// CHECK-NOT:     math.exp
// CHECK-NOT:     GEMM 1
// CHECK:         scf.for
// CHECK:           scf.for
// The token tile's rows of the softmax, a view indexed by the row loops' own variables: the
// inner loop's body is elementwise, and vectorises.
// CHECK:             %[[PT:.*]] = memref.subview %p[%{{.*}}, %{{.*}}] [%{{.*}}, %{{.*}}] [1, 1] : memref<40x384xf32> to memref<?x?xf32, strided<[384, 1], offset: ?>>
// CHECK:             scf.for %[[I:.*]] =
// CHECK:               scf.for %[[J:.*]] =
// CHECK-NEXT:            %[[P:.*]] = memref.load %[[PT]][%[[I]], %[[J]]] : memref<?x?xf32, strided<[384, 1], offset: ?>>
// CHECK:             %[[G:.*]] = arith.mulf %{{.*}}, %[[P]] : f32
// CHECK:             %[[R:.*]] = arith.truncf %[[G]] : f32 to bf16
// WIDE-NEXT:         %[[RW:.*]] = arith.extf %[[R]] : bf16 to f32
// WIDE-NEXT:         memref.store %[[RW]], %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x?xf32, strided<[64, 1]>>
// CHECK:             linalg.generic {{.*}} doc = "GEMM 2: input grad tile dX_t += G * W_v"
// NARROW-NEXT:       ^bb0(%{{.*}}: bf16, %{{.*}}: bf16, %{{.*}}: f32):
// WIDE-NEXT:         ^bb0(%{{.*}}: f32, %{{.*}}: bf16, %{{.*}}: f32):
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
