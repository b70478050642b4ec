// High-performance mode from compact kept logits (softmax_is_logits with logits_block B = 48):
// `softmax` holds E = exp(Z − C) in float16 and `softmax_block_max` C (BT, ceil(V/B)) each block
// of B columns' row maximum, as the forward (fused_linear_online_max_sum, same B) keeps them;
// the nest makes P = (E·exp(C[t, v // B] − logits_max))/sum_exp_logits itself. There is no
// GEMM 1; per row of a tile the loop runs over the blocks the tile's columns meet, from v0/B to
// ceil((v0 + tv)/B) (with tiles of 64 columns, blocks of 48 straddle the tiles: tile [0, 64)
// meets blocks 0 and 1, tile [64, 128) blocks 1 and 2, ...), loads C once per block and makes
// the block's scale exp(C − M) once, outside the loop over the block's columns; that loop only
// widens E, scales it and divides by S. The target's own column takes C of its block. At the
// vectorized stage the column loop runs 16 lanes (vector<16xf16> loads of E widened to f32, the
// scale broadcast once per block), a scalar loop after it for the block's remainder. The runs
// (host; npu-a2's phased nest, emulated) compare with the reference (P made in NumPy from the
// same E and C).
// RUN: npugrad-opt %s -p fuse-linear-cross-entropy-grad | FileCheck %s
// RUN: npugrad-opt %s --stage vectorized --cpu %inputs/avx512.toml | FileCheck %s --check-prefix=VEC
// RUN: npugrad-opt %s --stage run | FileCheck %s --check-prefix=EXEC
// RUN: npugrad-opt %s --target npu-a2 --stage run | FileCheck %s --check-prefix=EXEC

// CHECK-LABEL: func.func @flce_compact_logits
// CHECK-DAG:     %[[B:.*]] = arith.constant 48 : index
// CHECK-DAG:     %[[ONE:.*]] = arith.constant 1 : index
// CHECK-NOT:     GEMM 1
// CHECK:         scf.for %[[V0:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      arith.subi
// CHECK-NEXT:      %[[TV:.*]] = arith.minsi
// CHECK:           %[[ET:.*]] = memref.subview %e[%{{.*}}, %[[V0]]] [%{{.*}}, %[[TV]]] [1, 1] : memref<40x384xf16> to memref<?x?xf16, strided<[384, 1], offset: ?>>
// CHECK:           scf.for %[[I:.*]] =
// CHECK-NEXT:        %[[T:.*]] = arith.addi
// CHECK-NEXT:        %[[G:.*]] = memref.load %g[%[[T]]] : memref<40xf32>
// CHECK-NEXT:        %[[M:.*]] = memref.load %lm[%[[T]]] : memref<40xf32>
// CHECK-NEXT:        %[[S:.*]] = memref.load %se[%[[T]]] : memref<40xf32>
// The blocks the tile's columns meet.
// CHECK-NEXT:        %[[END:.*]] = arith.addi %[[V0]], %[[TV]] : index
// CHECK-NEXT:        %[[LAST:.*]] = arith.ceildivui %[[END]], %[[B]] : index
// CHECK-NEXT:        %[[FIRST:.*]] = arith.divui %[[V0]], %[[B]] : index
// CHECK-NEXT:        scf.for %[[BLK:.*]] = %[[FIRST]] to %[[LAST]] step %[[ONE]] {
// C once per block, and the block's scale exp(C − M), before the column loop.
// CHECK:               %[[C:.*]] = memref.load %c[%[[T]], %[[BLK]]] : memref<40x8xf32>
// CHECK-NEXT:          %[[D:.*]] = arith.subf %[[C]], %[[M]] : f32
// CHECK-NEXT:          %[[SC:.*]] = math.exp %[[D]] : f32
// CHECK:               %[[EB:.*]] = memref.subview %[[ET]][0, %{{.*}}] [%{{.*}}, %{{.*}}] [1, 1]
// CHECK:               scf.for %[[J:.*]] =
// CHECK-NEXT:            %[[E:.*]] = memref.load %[[EB]][%[[I]], %[[J]]] : memref<?x?xf16, strided<[384, 1], offset: ?>>
// CHECK-NEXT:            %[[EF:.*]] = arith.extf %[[E]] : f16 to f32
// CHECK-NEXT:            %[[P0:.*]] = arith.mulf %[[EF]], %[[SC]] : f32
// CHECK-NEXT:            %[[P:.*]] = arith.divf %[[P0]], %[[S]] : f32
// CHECK-NEXT:            arith.mulf %[[G]], %[[P]] : f32
// CHECK-NEXT:            arith.truncf %{{.*}} : f32 to bf16
// CHECK-NEXT:            memref.store
// CHECK-NEXT:          }
// CHECK-NEXT:        }
// CHECK-NEXT:      }
// The target's column: C of the block that holds it.
// CHECK:           scf.if
// CHECK:             %[[TB:.*]] = arith.divui %{{.*}}, %[[B]] : index
// CHECK-NEXT:        %[[TC:.*]] = memref.load %c[%{{.*}}, %[[TB]]] : memref<40x8xf32>
// CHECK-NEXT:        %[[TE:.*]] = memref.load %[[ET]][
// CHECK-NEXT:        %[[TEF:.*]] = arith.extf %[[TE]] : f16 to f32
// CHECK-NEXT:        %[[TD:.*]] = arith.subf %[[TC]], %{{.*}} : f32
// CHECK-NEXT:        %[[TS:.*]] = math.exp %[[TD]] : f32
// CHECK-NEXT:        arith.mulf %[[TEF]], %[[TS]] : f32
// CHECK:         linalg.generic {{.*}} doc = "GEMM 2: input grad tile dX_t += G * W_v"
// CHECK:         linalg.generic {{.*}} doc = "GEMM 3: weight grad tile dW_v += G^T * X_t"

// VEC-LABEL: func.func @flce_compact_logits
// VEC:         %[[C:.*]] = memref.load %c[%{{.*}}, %{{.*}}] : memref<40x8xf32>
// VEC-NEXT:    %[[D:.*]] = arith.subf %[[C]], %{{.*}} : f32
// VEC-NEXT:    %[[SC:.*]] = math.exp %[[D]] : f32
// VEC:         %[[SCV:.*]] = vector.broadcast %[[SC]] : f32 to vector<16xf32>
// VEC:         scf.for
// VEC-NEXT:      %[[EV:.*]] = vector.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x?xf16, strided<[384, 1], offset: ?>>, vector<16xf16>
// VEC-NEXT:      %[[EF:.*]] = arith.extf %[[EV]] : vector<16xf16> to vector<16xf32>
// VEC-NEXT:      %[[P0:.*]] = arith.mulf %[[EF]], %[[SCV]] : vector<16xf32>
// VEC-NEXT:      arith.divf %[[P0]], %{{.*}} : vector<16xf32>
// VEC:         } {train.vectorized}
// VEC-NEXT:    scf.for
// VEC-NEXT:      memref.load %{{.*}} : memref<?x?xf16, strided<[384, 1], offset: ?>>
// VEC-NEXT:      arith.extf %{{.*}} : f16 to f32
// VEC-NEXT:      arith.mulf %{{.*}}, %[[SC]] : f32

// EXEC:      input_grad_out {{.*}} bfloat16 {{.*}} ok
// EXEC-NEXT: weight_grad_out {{.*}} bfloat16 {{.*}} ok
func.func @flce_compact_logits(%g: memref<40xf32>, %x: memref<40x24xbf16>, %w: memref<384x24xbf16>, %mask: memref<5xui8>,
                               %t: memref<40xi64>, %lm: memref<40xf32>, %se: memref<40xf32>, %e: memref<40x384xf16>,
                               %c: memref<40x8xf32>, %gx: memref<40x24xbf16>, %gw: memref<384x24xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<40xf32>) input(%x : memref<40x24xbf16>)
      weight(%w : memref<384x24xbf16>) target_mask(%mask : memref<5xui8>) masked_target(%t : memref<40xi64>)
      logits_max(%lm : memref<40xf32>) sum_exp_logits(%se : memref<40xf32>) softmax(%e : memref<40x384xf16>)
      softmax_block_max(%c : memref<40x8xf32>)
      -> input_grad_out(%gx : memref<40x24xbf16>) weight_grad_out(%gw : memref<384x24xbf16>)
      {softmax_is_logits = true, logits_block = 48 : i64, tile_sizes = #train.tiles<bt = 16, v = 64>}
  func.return
}
