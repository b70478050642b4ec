// fuse-linear-online-max-sum: the forward of one vocabulary shard becomes one nest over vocabulary
// tiles (outer) and token tiles (inner). Per row, the online maximum and the rescaled sum of
// exponentials (s := s·exp(m_old − m_new) + Σ exp(z − m_new)) are kept in the outputs; the
// target's logit is picked up on the tile that holds it; the packed mask and masked targets are
// written by a loop of their own before the nest. The only scratch is tile-sized: no buffer that
// grows with V (the BT×V logits exist only when vocab_parallel_logits_out is asked for).
// RUN: npugrad-opt %s -p 'fuse-linear-online-max-sum{tile_bt=32 tile_v=64}' | FileCheck %s
// RUN: npugrad-opt %s -p 'fuse-linear-online-max-sum{tile_bt=32 tile_v=64 balance_blocks=2}' | FileCheck %s --check-prefix=BALANCE

// balance_blocks=2: the token loop steps by %token_step (linear_nests.token_step, checked in
// fuse-linear-cross-entropy-grad.mlir), computed before the statistics' loops, whose rows
// distribute-over-cores then divides between the blocks by the same step.
// BALANCE-LABEL: func.func @max_sum(
// BALANCE:         %[[BT:.*]] = memref.dim %x, %{{.*}} : memref<?x?xbf16>
// BALANCE:         %token_step = arith.maxui %{{.*}}, %{{.*}} : index
// BALANCE:         } {train.role = #train.role<statistics_init>}
// BALANCE:         scf.for
// BALANCE:           scf.for %[[T0:.*]] = %{{.*}} to %[[BT]] step %token_step {
// BALANCE-NEXT:        %{{.*}} = arith.subi %[[BT]], %[[T0]] : index
// BALANCE-NEXT:        %{{.*}} = arith.minsi %token_step, %{{.*}} : index
// BALANCE:           } {train.role = #train.role<token_loop>}

// CHECK-LABEL: func.func @max_sum(
// CHECK-DAG:     %[[NEG_INF:.*]] = arith.constant 0xff800000 : f32
// CHECK-DAG:     %[[CAP:.*]] = arith.constant 3.000000e+01 : f32
// CHECK:         %logits = memref.alloc() {alignment = 64 : i64, npu.promote = #npu.role<vector>} : memref<32x64xf32>
// CHECK-NOT:     memref.alloc({{.*}}) {{.*}}: memref<?x?xf32>
// Eight rows' mask bits make one byte (bit set: the target is not in this shard).
// CHECK:         scf.for
// CHECK-COUNT-8:   arith.shli
// CHECK:           memref.store {{.*}}, %mask[{{.*}}] : memref<?xui8>
// CHECK:         } {train.role = #train.role<target_masks>}
// CHECK:         scf.for
// CHECK:           memref.store %[[NEG_INF]], %m[
// CHECK:         } {train.role = #train.role<statistics_init>}
// CHECK:         scf.for
// CHECK:           scf.for
// CHECK:             linalg.generic {{.*}}attrs = {train.contraction = #train.contraction<logits, dims = [bt, h, v]>}
// The softcap, z := cap·tanh(z/cap), on the tile.
// CHECK:             arith.divf {{.*}}, %[[CAP]] : f32
// CHECK-NEXT:        math.tanh
// CHECK-NEXT:        arith.mulf {{.*}}, %[[CAP]] : f32
// The online max and the rescaled sum (and Σz for label smoothing), per row of the tile.
// CHECK:             arith.maximumf
// CHECK:             %[[OLD:.*]] = memref.load %m[
// CHECK:             %[[NEW:.*]] = arith.maximumf %[[OLD]],
// CHECK:             math.exp
// CHECK:             %[[DIFF:.*]] = arith.subf %[[OLD]], %[[NEW]] : f32
// CHECK-NEXT:        %[[SCALE:.*]] = math.exp %[[DIFF]] : f32
// CHECK:             memref.store %[[NEW]], %m[
// CHECK:             memref.store {{.*}}, %sz[
// The target's logit where this tile holds it.
// CHECK:             scf.if
// CHECK:               memref.store {{.*}}, %p[
// CHECK:           } {train.role = #train.role<token_loop>}
// CHECK-NEXT:    } {train.fused = #train.fused<"train.fused_linear_online_max_sum", #train.tiles<bt = 32, v = 64>>}
// Afterwards: the target logit relative to the max; ignored rows' statistics are 0.
// CHECK:         scf.for
// CHECK:           arith.cmpi eq, {{.*}} : i64
// CHECK:         } {train.role = #train.role<statistics_final>}
// CHECK-NOT:     train.fused_linear_online_max_sum input(
func.func @max_sum(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %t: memref<?xi64>,
                   %m: memref<?xf32>, %s: memref<?xf32>, %p: memref<?xf32>, %mask: memref<?xui8>,
                   %mt: memref<?xi64>, %sz: memref<?xf32>) {
  train.fused_linear_online_max_sum input(%x : memref<?x?xbf16>) weight(%w : memref<?x?xbf16>)
      target(%t : memref<?xi64>) -> logits_max_local_out(%m : memref<?xf32>)
      sum_exp_logits_local_out(%s : memref<?xf32>) predicted_logits_local_out(%p : memref<?xf32>)
      target_mask_out(%mask : memref<?xui8>) masked_target_out(%mt : memref<?xi64>)
      sum_logits_local_out(%sz : memref<?xf32>)
      {vocab_start_index = 1000 : i64, vocab_end_index = 1300 : i64, softcap = 30.0 : f64, ignore_index = -100 : i64}
  func.return
}

// With the logits asked for, they are written tile by tile into the (BT, V) output: still no
// scratch that grows with V.
// CHECK-LABEL: func.func @with_logits(
// CHECK:         %logits = memref.alloc() {{.*}} : memref<32x64xf32>
// CHECK:         linalg.generic {{.*}}#train.contraction<logits
// CHECK:         %[[Z:.*]] = memref.subview %z[{{.*}}] : memref<100x300xf32> to memref<?x?xf32, strided<[300, 1], offset: ?>>
// CHECK:         memref.store {{.*}}, %[[Z]][
// CHECK:       } {train.fused = #train.fused<"train.fused_linear_online_max_sum"
func.func @with_logits(%x: memref<100x48xf32>, %w: memref<300x48xf32>, %t: memref<100xi32>,
                       %m: memref<100xf32>, %s: memref<100xf32>, %p: memref<100xf32>,
                       %mask: memref<13xui8>, %mt: memref<100xi32>, %z: memref<100x300xf32>) {
  train.fused_linear_online_max_sum input(%x : memref<100x48xf32>) weight(%w : memref<300x48xf32>)
      target(%t : memref<100xi32>) -> logits_max_local_out(%m : memref<100xf32>)
      sum_exp_logits_local_out(%s : memref<100xf32>) predicted_logits_local_out(%p : memref<100xf32>)
      target_mask_out(%mask : memref<13xui8>) masked_target_out(%mt : memref<100xi32>)
      vocab_parallel_logits_out(%z : memref<100x300xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 300 : i64}
  func.return
}

// Compact logits (logits_block B = 32): the vocabulary tile is whole blocks, the op's v = 100
// rounded down to a multiple of B, 96 (the last tile, [288, 300), holds the partial block of 12).
// Per row, after the statistics, each of the tile's blocks: its maximum (an scf.for carrying it),
// stored into the block maxima at block v0/B + b, then exp(z − max) rounded to float16 into the
// logits output.
// CHECK-LABEL: func.func @compact_logits(
// CHECK-DAG:     %[[V:.*]] = arith.constant 300 : index
// CHECK-DAG:     %[[TILE:.*]] = arith.constant 96 : index
// CHECK-DAG:     %[[B:.*]] = arith.constant 32 : index
// CHECK-DAG:     %[[NEG_INF:.*]] = arith.constant 0xff800000 : f32
// CHECK:         %logits = memref.alloc() {{.*}} : memref<16x96xf32>
// CHECK:         scf.for %[[V0:.*]] = %{{.*}} to %[[V]] step %[[TILE]] {
// CHECK-NEXT:      arith.subi %[[V]], %[[V0]] : index
// CHECK-NEXT:      %[[TV:.*]] = arith.minsi %[[TILE]], %{{.*}} : index
// CHECK:             %[[LT:.*]] = memref.subview %logits[0, 0] [%{{.*}}, %[[TV]]] [1, 1] : memref<16x96xf32> to memref<?x?xf32, strided<[96, 1]>>
// CHECK:             linalg.generic {{.*}}#train.contraction<logits
// CHECK:             %[[Z:.*]] = memref.subview %z[%{{.*}}, %[[V0]]] [%{{.*}}, %[[TV]]] [1, 1] : memref<100x300xf16> to memref<?x?xf16, strided<[300, 1], offset: ?>>
// CHECK-NEXT:        scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:          %[[T:.*]] = arith.addi %{{.*}}, %[[I]] : index
// The statistics first.
// CHECK:               memref.store %{{.*}}, %s[%[[T]]] : memref<100xf32>
// CHECK-NEXT:          memref.store %{{.*}}, %m[%[[T]]] : memref<100xf32>
// CHECK:               %[[FIRST:.*]] = arith.divui %[[V0]], %[[B]] : index
// CHECK-NEXT:          %[[NB:.*]] = arith.ceildivui %[[TV]], %[[B]] : index
// CHECK-NEXT:          scf.for %[[BI:.*]] = %{{.*}} to %[[NB]] step %{{.*}} {
// CHECK-NEXT:            %[[B0:.*]] = arith.muli %[[BI]], %[[B]] : index
// CHECK-NEXT:            arith.subi %[[TV]], %[[B0]] : index
// CHECK-NEXT:            %[[W:.*]] = arith.minsi %[[B]], %{{.*}} : index
// CHECK-NEXT:            memref.dim
// CHECK-NEXT:            %[[ZB:.*]] = memref.subview %[[LT]][0, %[[B0]]] [%{{.*}}, %[[W]]] [1, 1]
// CHECK-NEXT:            memref.dim
// CHECK-NEXT:            %[[EB:.*]] = memref.subview %[[Z]][0, %[[B0]]] [%{{.*}}, %[[W]]] [1, 1]
// The block's maximum...
// CHECK-NEXT:            %[[MAX:.*]] = scf.for %{{.*}} = %{{.*}} to %[[W]] step %{{.*}} iter_args(%[[ACC:.*]] = %[[NEG_INF]]) -> (f32) {
// CHECK-NEXT:              %[[ZV:.*]] = memref.load %[[ZB]][%[[I]], %{{.*}}]
// CHECK-NEXT:              %[[NM:.*]] = arith.maximumf %[[ZV]], %[[ACC]] : f32
// CHECK-NEXT:              scf.yield %[[NM]] : f32
// CHECK-NEXT:            }
// ... stored as C[t, v0/B + b]...
// CHECK-NEXT:            %[[BLK:.*]] = arith.addi %[[FIRST]], %[[BI]] : index
// CHECK-NEXT:            memref.store %[[MAX]], %c[%[[T]], %[[BLK]]] : memref<100x10xf32>
// ... and E = f16(exp(z − C)).
// CHECK-NEXT:            scf.for %[[J:.*]] = %{{.*}} to %[[W]] step %{{.*}} {
// CHECK-NEXT:              %[[ZJ:.*]] = memref.load %[[ZB]][%[[I]], %[[J]]]
// CHECK-NEXT:              %[[D:.*]] = arith.subf %[[ZJ]], %[[MAX]] : f32
// CHECK-NEXT:              %[[E:.*]] = math.exp %[[D]] : f32
// CHECK-NEXT:              %[[EH:.*]] = arith.truncf %[[E]] : f32 to f16
// CHECK-NEXT:              memref.store %[[EH]], %[[EB]][%[[I]], %[[J]]] : memref<?x?xf16, strided<[300, 1], offset: ?>>
// CHECK-NEXT:            }
// CHECK-NEXT:          }
// CHECK-NEXT:        }
// CHECK-NEXT:      } {train.role = #train.role<token_loop>}
// CHECK-NEXT:    } {train.fused = #train.fused<"train.fused_linear_online_max_sum", #train.tiles<bt = 16, v = 96>>}
func.func @compact_logits(%x: memref<100x48xbf16>, %w: memref<300x48xbf16>, %t: memref<100xi64>,
                          %m: memref<100xf32>, %s: memref<100xf32>, %p: memref<100xf32>,
                          %mask: memref<13xui8>, %mt: memref<100xi64>, %z: memref<100x300xf16>,
                          %c: memref<100x10xf32>) {
  train.fused_linear_online_max_sum input(%x : memref<100x48xbf16>) weight(%w : memref<300x48xbf16>)
      target(%t : memref<100xi64>) -> logits_max_local_out(%m : memref<100xf32>)
      sum_exp_logits_local_out(%s : memref<100xf32>) predicted_logits_local_out(%p : memref<100xf32>)
      target_mask_out(%mask : memref<13xui8>) masked_target_out(%mt : memref<100xi64>)
      vocab_parallel_logits_out(%z : memref<100x300xf16>) logits_block_max_out(%c : memref<100x10xf32>)
      {vocab_start_index = 0 : i64, vocab_end_index = 300 : i64, logits_block = 32 : i64,
       tile_sizes = #train.tiles<bt = 16, v = 100>}
  func.return
}

// The shard given at run time (vocab_range): the start is loaded where the properties' constant
// was, and the shard's width is weight's rows, so no range makes a column past the shard's.
// CHECK-LABEL: func.func @run_time_range(
// CHECK-SAME:      %[[W:[^:]*]]: memref<?x?xbf16>, %[[T:[^:]*]]: memref<?xi64>, %[[R:[^:]*]]: memref<2xi64>
// CHECK:         %[[V:.*]] = memref.dim %[[W]], %{{.*}} : memref<?x?xbf16>
// CHECK:         %[[Y:.*]] = memref.load %[[T]][%{{.*}}] : memref<?xi64>
// CHECK-NEXT:    %[[START:.*]] = memref.load %[[R]][%{{.*}}] : memref<2xi64>
// CHECK-NEXT:    %[[WIDTH:.*]] = arith.index_cast %[[V]] : index to i64
// CHECK-NEXT:    %[[LOCAL:.*]] = arith.subi %[[Y]], %[[START]] : i64
// CHECK-NEXT:    arith.cmpi ult, %[[LOCAL]], %[[WIDTH]] : i64
// CHECK-NOT:     vocab_start_index
func.func @run_time_range(%x: memref<?x?xbf16>, %w: memref<?x?xbf16>, %t: memref<?xi64>, %r: memref<2xi64>,
                          %m: memref<?xf32>, %s: memref<?xf32>, %p: memref<?xf32>, %mask: memref<?xui8>, %mt: memref<?xi64>) {
  train.fused_linear_online_max_sum input(%x : memref<?x?xbf16>) weight(%w : memref<?x?xbf16>)
      target(%t : memref<?xi64>) vocab_range(%r : memref<2xi64>) -> logits_max_local_out(%m : memref<?xf32>)
      sum_exp_logits_local_out(%s : memref<?xf32>) predicted_logits_local_out(%p : memref<?xf32>)
      target_mask_out(%mask : memref<?xui8>) masked_target_out(%mt : memref<?xi64>)
  func.return
}
