// Tile sizes written by hand are kept by choose-tile-sizes and rejected by check-capacity, like
// any buffer, when their tiles do not fit: a tile of 10000 elements (the whole array: the
// tiling takes no more) is x, y, dx * 40000 B * 2 (double-buffered) = 234.375 KiB > UB 192 KiB,
// reported at the op for its last buffer (whose name is the tiling's). The report does not
// refuse it: it says by how much each level is exceeded, 240000 - 196608 = 43392 B in the UB.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics --target npu-a2 --stage tiled
// RUN: npugrad-opt %s --split-input-file --target npu-a2 --report | FileCheck %s
// CHECK: // report of @bce_tile_too_big on npu-a2 (20 cores)
// CHECK-NEXT: // does not fit npu-a2: ub by 43392 B (42.38 KiB, 1.22x its capacity); the figures below are what it would cost
// CHECK: //   ub: 240000 B of 196608 B = 122.1% (234.4 KiB of 192 KiB), does not fit: 43392 B (42.38 KiB) over

func.func @bce_tile_too_big(%x: memref<10000xf32>, %y: memref<10000xf32>, %d: memref<1xf32>, %dx: memref<10000xf32>) {
  // expected-error@+1 {{(memref<10000xf32, #npu.mem<ub>>, 39.0625 KiB x 2 double-buffered = 78.125 KiB) does not fit level 'ub' of target npu-a2: 234.375 KiB in use there, capacity 192 KiB}}
  train.binary_cross_entropy_grad input_x(%x : memref<10000xf32>) input_y(%y : memref<10000xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<10000xf32>) {tile_sizes = #train.tiles<n = 1000000>}
  func.return
}

// -----

// Half of it fits: 3 * 20000 B * 2 = 117.1875 KiB.
// CHECK: // report of @bce_tile_fits on npu-a2 (20 cores)
// CHECK: //   ub: 120000 B of 196608 B = 61.0% (117.2 KiB of 192 KiB)
func.func @bce_tile_fits(%x: memref<10000xf32>, %y: memref<10000xf32>, %d: memref<1xf32>, %dx: memref<10000xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<10000xf32>) input_y(%y : memref<10000xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<10000xf32>) {tile_sizes = #train.tiles<n = 5000>}
  func.return
}
