// High-performance mode from kept logits (softmax_is_logits): `softmax` holds the logits Z a
// forward kept (here bfloat16, rounded), and the nest makes P = exp(Z − logits_max)/sum_exp_logits
// itself, per element, as memory-saving mode makes it from the logits GEMM 1 recomputes: there
// is no GEMM 1, and the row's statistics are loaded once per row. At the vectorized stage the
// row loop runs 16 lanes (the tile's view indexed by the loops' own variables), its exp on
// vectors; on a target whose global memory gives a latency each lane group's load of Z is
// preceded by a prefetch. The runs (host; npu-a2's phased nest, emulated) compare with the
// reference (P made in NumPy from the same Z).
// RUN: npugrad-opt %s -p fuse-linear-cross-entropy-grad | FileCheck %s
// RUN: npugrad-opt %s --stage vectorized --cpu %inputs/avx512.toml | FileCheck %s --check-prefix=VEC
// RUN: npugrad-opt %s --stage run | FileCheck %s --check-prefix=EXEC
// RUN: npugrad-opt %s --target npu-a2 --stage run | FileCheck %s --check-prefix=EXEC

// CHECK-LABEL: func.func @flce_kept_logits
// CHECK-NOT:     GEMM 1
// CHECK:         %[[ZT:.*]] = memref.subview %z[%{{.*}}, %{{.*}}] [%{{.*}}, %{{.*}}] [1, 1] : memref<40x384xbf16> to memref<?x?xbf16, strided<[384, 1], offset: ?>>
// CHECK:         scf.for %[[I:.*]] =
// CHECK-NEXT:      %[[T:.*]] = arith.addi
// CHECK-NEXT:      %[[G:.*]] = memref.load %g[%[[T]]] : memref<40xf32>
// CHECK-NEXT:      %[[M:.*]] = memref.load %lm[%[[T]]] : memref<40xf32>
// CHECK-NEXT:      %[[S:.*]] = memref.load %se[%[[T]]] : memref<40xf32>
// CHECK-NEXT:      scf.for %[[J:.*]] =
// CHECK-NEXT:        %[[Z:.*]] = memref.load %[[ZT]][%[[I]], %[[J]]] : memref<?x?xbf16, strided<[384, 1], offset: ?>>
// CHECK-NEXT:        %[[ZF:.*]] = arith.extf %[[Z]] : bf16 to f32
// CHECK-NEXT:        %[[D:.*]] = arith.subf %[[ZF]], %[[M]] : f32
// CHECK-NEXT:        %[[E:.*]] = math.exp %[[D]] : f32
// CHECK-NEXT:        %[[P:.*]] = arith.divf %[[E]], %[[S]] : f32
// CHECK-NEXT:        arith.mulf %[[G]], %[[P]] : f32
// CHECK:         linalg.generic {{.*}} doc = "GEMM 2: input grad tile dX_t += G * W_v"
// CHECK:         linalg.generic {{.*}} doc = "GEMM 3: weight grad tile dW_v += G^T * X_t"

// VEC-LABEL: func.func @flce_kept_logits
// VEC:         vector.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x?xbf16, strided<[384, 1], offset: ?>>, vector<16xbf16>
// VEC-NEXT:    arith.extf %{{.*}} : vector<16xbf16> to vector<16xf32>
// VEC-NEXT:    arith.subf %{{.*}}, %{{.*}} : vector<16xf32>
// VEC-NEXT:    math.exp %{{.*}} : vector<16xf32>
// VEC-NEXT:    arith.divf %{{.*}}, %{{.*}} : vector<16xf32>
// VEC:         } {train.vectorized}

// EXEC:      input_grad_out {{.*}} bfloat16 {{.*}} ok
// EXEC-NEXT: weight_grad_out {{.*}} bfloat16 {{.*}} ok
func.func @flce_kept_logits(%g: memref<40xf32>, %x: memref<40x24xbf16>, %w: memref<384x24xbf16>, %mask: memref<5xui8>,
                            %t: memref<40xi64>, %lm: memref<40xf32>, %se: memref<40xf32>, %z: memref<40x384xbf16>,
                            %gx: memref<40x24xbf16>, %gw: memref<384x24xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<40xf32>) input(%x : memref<40x24xbf16>)
      weight(%w : memref<384x24xbf16>) target_mask(%mask : memref<5xui8>) masked_target(%t : memref<40xi64>)
      logits_max(%lm : memref<40xf32>) sum_exp_logits(%se : memref<40xf32>) softmax(%z : memref<40x384xbf16>)
      -> input_grad_out(%gx : memref<40x24xbf16>) weight_grad_out(%gw : memref<384x24xbf16>)
      {softmax_is_logits = true, tile_sizes = #train.tiles<bt = 16, v = 64>}
  func.return
}
