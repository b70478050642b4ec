// tile-for-target reads only each op's tile_sizes: here 256 elements, written by hand, for npu-a2.
// The tiled operands get double-buffered 256-element buffers in the vector level (UB); tiles are
// dealt to the blocks round-robin: 1000 elements are ceil(1000/256) = 4 tiles, the last one
// 1000 - 3·256 = 232 elements long (min(256, 1000 - offset)). The op itself runs on the tiles,
// without tile sizes: a tile instance.
// RUN: npugrad-opt %s -p 'tile-for-target{target=npu-a2}' | FileCheck %s

// CHECK-LABEL: func.func @bce(
// CHECK-DAG:     %[[N:.*]] = arith.constant 1000 : index
// CHECK-DAG:     %[[TILES:.*]] = arith.constant 4 : index
// CHECK-DAG:     %[[T:.*]] = arith.constant 256 : index
// CHECK:         %[[BID:.*]] = npu.block_idx
// CHECK:         %[[NBLK:.*]] = npu.block_dim
// CHECK:         %[[X:.*]] = npu.alloc_local {double_buffer} : memref<256xf32, #npu.mem<ub>>
// CHECK:         %[[Y:.*]] = npu.alloc_local {double_buffer} : memref<256xf32, #npu.mem<ub>>
// CHECK:         %[[DX:.*]] = npu.alloc_local {double_buffer} : memref<256xf32, #npu.mem<ub>>
// CHECK:         scf.for %[[TILE:.*]] = %[[BID]] to %[[TILES]] step %[[NBLK]] {
// CHECK:           %[[OFF:.*]] = arith.muli %[[TILE]], %[[T]] : index
// CHECK:           %[[LEFT:.*]] = arith.subi %[[N]], %[[OFF]] : index
// CHECK:           %[[K:.*]] = arith.minsi %[[T]], %[[LEFT]] : index
// CHECK:           %[[XG:.*]] = memref.subview %x[%[[OFF]]] [%[[K]]] [1]
// CHECK:           %[[XL:.*]] = memref.subview %[[X]][0] [%[[K]]] [1]
// CHECK:           npu.copy %[[XG]], %[[XL]]
// CHECK:           train.binary_cross_entropy_grad input_x(%[[XL]] : {{.*}}) {{.*}} dloss(%d : memref<f32>) -> dx({{.*}}) {reduction = 2 : i64}
// CHECK-NEXT:      npu.copy
// CHECK-NEXT:    } {train.tiles = #train.tiles<n = 256>}
// CHECK-NOT:     train.binary_cross_entropy_grad
func.func @bce(%x: memref<1000xf32>, %y: memref<1000xf32>, %d: memref<f32>, %dx: memref<1000xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<1000xf32>) input_y(%y : memref<1000xf32>)
      dloss(%d : memref<f32>) -> dx(%dx : memref<1000xf32>) {reduction = 2 : i64, tile_sizes = #train.tiles<n = 256>}
  func.return
}
