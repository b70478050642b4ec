// choose-tile-sizes writes each train op's tile decision as #train.tiles, from the target alone.
// RUN: npugrad-opt %s -p 'choose-tile-sizes{target=npu-a2}' | FileCheck %s
//
// npu-a2's vector level (UB) holds 192 KiB, aligned to 32 bytes, double-buffered: one set of
// tiles gets 96 KiB = 98304 bytes. A vector is 2048 bits = 64 float32 lanes.

// Static shapes: the sizes the cost model predicts fastest (train.predicted_cycles), within the
// level. Mean BCE on 10000 float32 elements: the recipe's heuristic alone would take the largest
// tile, 98304 B / 12 B per element = 8192, two tiles for 20 cores: 1548 cycles on the vector unit.
// The search takes n = 512: 20 tiles, one per core, 512 x 4 B x 2 = 4096 B in on each core
// (4096 / 56.06 + 2 x 24 = 121.1 cycles), bound by the 120000 B all cores move through global
// memory, 120000 / 888.9 = 135.0 cycles (a larger tile only idles cores; a smaller one adds copies).
// CHECK-LABEL: func.func @bce(
// CHECK:       train.binary_cross_entropy_grad {{.*}} {train.predicted_cycles = 1.350000e+02 : f64, tile_sizes = #train.tiles<n = 512>}
func.func @bce(%x: memref<10000xf32>, %y: memref<10000xf32>, %d: memref<1xf32>, %dx: memref<10000xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<10000xf32>) input_y(%y : memref<10000xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<10000xf32>)
  func.return
}

// 100 bf16 elements: the smallest tile (8 elements, 13 tiles over 13 cores) costs least: each core
// copies 3 x 16 B in (3 copies, 72 cycles of setup dominate).
// CHECK-LABEL: func.func @bce_small(
// CHECK:       train.binary_cross_entropy_grad {{.*}} {train.predicted_cycles = 7.286000e+01 : f64, reduction = 0 : i64, tile_sizes = #train.tiles<n = 8>}
func.func @bce_small(%x: memref<100xbf16>, %y: memref<100xbf16>, %d: memref<100xbf16>, %dx: memref<100xbf16>) {
  train.binary_cross_entropy_grad input_x(%x : memref<100xbf16>) input_y(%y : memref<100xbf16>)
      dloss(%d : memref<100xbf16>) -> dx(%dx : memref<100xbf16>) {reduction = 0 : i64}
  func.return
}

// Dynamic shapes: the recipe's heuristic, unpredicted.
// NLL: all 1000 classes fit a quarter of the level (6144 float32). Per tile of `rows` samples,
// double-buffered, each padded to 32 bytes: out rows·4000, targets rows·8, weights 4000.
// rows = 23: 2·(92000 + 192 + 4000) = 192384 <= 196608; rows = 24: 2·(96000 + 192 + 4000) = 200384 > it.
// CHECK-LABEL: func.func @nll(
// CHECK:       train.nll_loss_backward {{.*}} {tile_sizes = #train.tiles<rows = 23, c = 1000>}
func.func @nll(%go: memref<f32>, %s: memref<?x1000xf32>, %t: memref<?xi64>, %w: memref<1000xf32>,
               %tw: memref<1xf32>, %o: memref<?x1000xf32>) {
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<?x1000xf32>) target(%t : memref<?xi64>)
      weight(%w : memref<1000xf32>) total_weight(%tw : memref<1xf32>) -> out(%o : memref<?x1000xf32>)
  func.return
}

// Sizes written by hand are kept; the pass fills in only what is missing.
// CHECK-LABEL: func.func @by_hand(
// CHECK:       train.nll_loss_backward {{.*}} {tile_sizes = #train.tiles<rows = 3, c = 1000>}
func.func @by_hand(%go: memref<f32>, %s: memref<?x1000xf32>, %t: memref<?xi64>, %w: memref<1000xf32>,
                   %tw: memref<1xf32>, %o: memref<?x1000xf32>) {
  train.nll_loss_backward grad_output(%go : memref<f32>) self(%s : memref<?x1000xf32>) target(%t : memref<?xi64>)
      weight(%w : memref<1000xf32>) total_weight(%tw : memref<1xf32>) -> out(%o : memref<?x1000xf32>)
      {tile_sizes = #train.tiles<rows = 3>}
  func.return
}
