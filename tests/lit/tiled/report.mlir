// npugrad-opt --report: the tiled IR, then per function the local buffers of every level against
// its capacity and the bytes every npu.copy moves, over all blocks, partial tiles counted exactly.
// RUN: npugrad-opt %s --target npu-a2 --report | FileCheck %s --check-prefixes=CHECK,A2
// RUN: npugrad-opt %s --target host --report | FileCheck %s --check-prefixes=CHECK,HOST
// The output still parses (the report is comments):
// RUN: npugrad-opt %s --target npu-a2 --report | npugrad-opt | FileCheck %s --check-prefix=REPARSE
// REPARSE: func.func @nll_16x512
// Buffer names are the tilings' to choose: not checked.

// NLL, out 100x1000xf32, target 100xi64, weight 1000xf32, tiles of 16 rows x 512 columns:
// 7 row tiles (6 of 16 rows, one of 4) x 2 column tiles (512, 488 columns) = 14 tiles.
// Buffers: out 16*512*4 = 32768 B, target 16*8 = 128 B, weight 512*4 = 2048 B; on npu-a2
// double-buffered in the UB: 2 * 34944 = 69888 B of 196608 B = 35.5%; on host in L2, once.
// In: every tile copies its rows' targets and its columns' weights: the targets 2 times (once per
// column tile), 2 * 100 * 8 = 1600 B, the weights 7 times (once per row tile), 7 * 1000 * 4 =
// 28000 B: 29600 B in 2 * 14 = 28 copies. Out: out once, 100 * 1000 * 4 = 400000 B in 14 copies.
// Arguments: 4 + 400000 + 800 + 4000 + 4 + 400000 = 804808 B.
// CHECK-LABEL: // report of @nll_16x512 on
// A2-SAME:     npu-a2 (20 cores)
// CHECK:       // local memory per core:
// A2:          //   l1: 0 B of 524288 B = 0.0% (0 B of 512 KiB)
// A2:          //   l0a: 0 B of 65536 B = 0.0% (0 B of 64 KiB)
// A2:          //   l0b: 0 B of 65536 B = 0.0% (0 B of 64 KiB)
// A2:          //   l0c: 0 B of 131072 B = 0.0% (0 B of 128 KiB)
// A2-NEXT:     //   ub: 69888 B of 196608 B = 35.5% (68.25 KiB of 192 KiB)
// A2-NEXT:     //     %{{[a-z_0-9]+}} : memref<16x512xf32, #npu.mem<ub>> 32768 B x2 double-buffered = 65536 B
// A2-NEXT:     //     %{{[a-z_0-9]+}} : memref<16xi64, #npu.mem<ub>> 128 B x2 double-buffered = 256 B
// A2-NEXT:     //     %{{[a-z_0-9]+}} : memref<512xf32, #npu.mem<ub>> 2048 B x2 double-buffered = 4096 B
// HOST:        //   l2: 34944 B of {{[0-9]+}} B
// HOST-NEXT:   //     %{{[a-z_0-9]+}} : memref<16x512xf32, #npu.mem<l2>> 32768 B
// HOST-NEXT:   //     %{{[a-z_0-9]+}} : memref<16xi64, #npu.mem<l2>> 128 B
// HOST-NEXT:   //     %{{[a-z_0-9]+}} : memref<512xf32, #npu.mem<l2>> 2048 B
// The scale -grad_output/total_weight is read from global memory once per block, not copied.
// A2:          // not counted: 2 memref.load reading or writing gm directly
// A2-NEXT:     // bytes moved (all 20 blocks):
// A2-NEXT:     //   gm -> ub: 29600 B in 28 copies (28.91 KiB)
// A2-NEXT:     //   ub -> gm: 400000 B in 14 copies (390.6 KiB)
// HOST:        // bytes moved (all {{[0-9]+}} blocks):
// HOST-NEXT:   //   dram -> l2: 29600 B in 28 copies (28.91 KiB)
// HOST-NEXT:   //   l2 -> dram: 400000 B in 14 copies (390.6 KiB)
// CHECK-NEXT:  //   total: 429600 B in 42 copies (419.5 KiB)
// CHECK:       // global traffic: 429600 B = 0.53x the 804808 B of the arguments
// CHECK:       // exact: trip counts and tile sizes evaluated on the static shapes
func.func @nll_16x512(%g: memref<f32>, %s: memref<100x1000xf32>, %t: memref<100xi64>, %w: memref<1000xf32>,
    %tw: memref<1xf32>, %o: memref<100x1000xf32>) {
  train.nll_loss_backward grad_output(%g : memref<f32>) self(%s : memref<100x1000xf32>) target(%t : memref<100xi64>)
      weight(%w : memref<1000xf32>) total_weight(%tw : memref<1xf32>) -> out(%o : memref<100x1000xf32>)
      {tile_sizes = #train.tiles<rows = 16, c = 512>}
  func.return
}

// The same op tiled 8 rows x all 1000 columns: 13 row tiles (12 of 8 rows, one of 4), one column
// tile. Buffers: out 8*1000*4 = 32000 B, target 64 B, weight 4000 B (4032 B at host's 64-byte
// alignment); npu-a2: 2 * 36064 = 72128 B = 36.7% of the UB. The weights now come in 13 times:
// 13 * 4000 + 800 = 52800 B in 26 copies, 23200 B more than the 16x512 tiling.
// CHECK-LABEL: // report of @nll_8x1000 on
// A2:          //   ub: 72128 B of 196608 B = 36.7% (70.44 KiB of 192 KiB)
// A2-NEXT:     //     %{{[a-z_0-9]+}} : memref<8x1000xf32, #npu.mem<ub>> 32000 B x2 double-buffered = 64000 B
// A2-NEXT:     //     %{{[a-z_0-9]+}} : memref<8xi64, #npu.mem<ub>> 64 B x2 double-buffered = 128 B
// A2-NEXT:     //     %{{[a-z_0-9]+}} : memref<1000xf32, #npu.mem<ub>> 4000 B x2 double-buffered = 8000 B
// HOST:        //   l2: 36096 B of {{[0-9]+}} B
// HOST-NEXT:   //     %{{[a-z_0-9]+}} : memref<8x1000xf32, #npu.mem<l2>> 32000 B
// HOST-NEXT:   //     %{{[a-z_0-9]+}} : memref<8xi64, #npu.mem<l2>> 64 B
// HOST-NEXT:   //     %{{[a-z_0-9]+}} : memref<1000xf32, #npu.mem<l2>> 4032 B (4000 B aligned)
// A2:          //   gm -> ub: 52800 B in 26 copies (51.56 KiB)
// A2-NEXT:     //   ub -> gm: 400000 B in 13 copies (390.6 KiB)
// HOST:        //   dram -> l2: 52800 B in 26 copies (51.56 KiB)
// HOST-NEXT:   //   l2 -> dram: 400000 B in 13 copies (390.6 KiB)
// CHECK-NEXT:  //   total: 452800 B in 39 copies (442.2 KiB)
// CHECK:       // global traffic: 452800 B = 0.56x the 804808 B of the arguments
// CHECK:       // exact:
func.func @nll_8x1000(%g: memref<f32>, %s: memref<100x1000xf32>, %t: memref<100xi64>, %w: memref<1000xf32>,
    %tw: memref<1xf32>, %o: memref<100x1000xf32>) {
  train.nll_loss_backward grad_output(%g : memref<f32>) self(%s : memref<100x1000xf32>) target(%t : memref<100xi64>)
      weight(%w : memref<1000xf32>) total_weight(%tw : memref<1xf32>) -> out(%o : memref<100x1000xf32>)
      {tile_sizes = #train.tiles<rows = 8, c = 1000>}
  func.return
}

// BCE on 10000 elements in tiles of 4096: 3 tiles of 4096, 4096 and 1808 elements, the last one
// partial. Buffers: x, y, dx tiles of 4096*4 = 16384 B (npu-a2: 3 * 2 * 16384 = 98304 B = 50.0%).
// In: x and y, 2 * 10000 * 4 = 80000 B in 2 * 3 copies; out: dx, 40000 B in 3 copies.
// On npu-a2 blocks 0, 1, 2 take one tile each: the busiest moves 3 * 16384 = 49152 B.
// CHECK-LABEL: // report of @bce on
// A2:          //   ub: 98304 B of 196608 B = 50.0% (96 KiB of 192 KiB)
// A2-NEXT:     //     %{{[a-z_0-9]+}} : memref<4096xf32, #npu.mem<ub>> 16384 B x2 double-buffered = 32768 B
// A2-NEXT:     //     %{{[a-z_0-9]+}} : memref<4096xf32, #npu.mem<ub>> 16384 B x2 double-buffered = 32768 B
// A2-NEXT:     //     %{{[a-z_0-9]+}} : memref<4096xf32, #npu.mem<ub>> 16384 B x2 double-buffered = 32768 B
// HOST:        //   l2: 49152 B of {{[0-9]+}} B
// A2:          //   gm -> ub: 80000 B in 6 copies (78.12 KiB)
// A2-NEXT:     //   ub -> gm: 40000 B in 3 copies (39.06 KiB)
// HOST:        //   dram -> l2: 80000 B in 6 copies (78.12 KiB)
// HOST-NEXT:   //   l2 -> dram: 40000 B in 3 copies (39.06 KiB)
// CHECK-NEXT:  //   total: 120000 B in 9 copies (117.2 KiB)
// A2-NEXT:     //   busiest block: 0 with 49152 B
// CHECK:       // global traffic: 120000 B = 1.00x the 120004 B of the arguments
// CHECK:       // exact:
func.func @bce(%x: memref<10000xf32>, %y: memref<10000xf32>, %d: memref<1xf32>, %dx: memref<10000xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<10000xf32>) input_y(%y : memref<10000xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<10000xf32>) {tile_sizes = #train.tiles<n = 4096>}
  func.return
}

// Dynamic shapes: the buffers are static, the bytes moved are not.
// CHECK-LABEL: // report of @bce_dynamic on
// A2:          //   ub: 98304 B of 196608 B = 50.0%
// CHECK:       // bytes moved: the report needs static shapes (dynamic: %x: memref<?xf32>, %y: memref<?xf32>, %dx: memref<?xf32>)
func.func @bce_dynamic(%x: memref<?xf32>, %y: memref<?xf32>, %d: memref<1xf32>, %dx: memref<?xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<?xf32>) input_y(%y : memref<?xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<?xf32>) {tile_sizes = #train.tiles<n = 4096>}
  func.return
}
