// npugrad-opt --report --compare: two tilings of the same function side by side.
// RUN: npugrad-opt %s --target npu-a2 --report --compare %inputs/bce_tiles_256.mlir | FileCheck %s
// 10000 float32 elements, x and y in, dx out: tiles of 4096 (3 tiles, 3 cores busy) against
// tiles of 256 (40 tiles, 2 per core). Both move 120000 B; 4096-element tiles leave 17 cores idle:
// the busiest core copies 2 x 16 KiB in over 56.06 B per cycle, 632.5 cycles against 169.1.
// CHECK:      // compare @bce with @bce on npu-a2
// CHECK-NEXT: //   {{ +}}{{.*}}compare.mlir{{ +}}{{.*}}bce_tiles_256.mlir
// CHECK-NEXT: // tiles {{ +}}n = 4096 {{ +}}n = 256
// CHECK:      // ub used {{ +}}96 KiB (50%) {{ +}}6 KiB (3%)
// CHECK:      // gm -> ub {{ +}}78.12 KiB {{ +}}78.12 KiB
// CHECK:      // global traffic {{ +}}117.2 KiB {{ +}}117.2 KiB
// CHECK:      // predicted {{ +}}632.5 cycles {{.*}} 169.1 cycles
// CHECK-NEXT: // bound by {{ +}}gm -> ub {{ +}}gm -> ub
func.func @bce(%x: memref<10000xf32>, %y: memref<10000xf32>, %d: memref<1xf32>, %dx: memref<10000xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<10000xf32>) input_y(%y : memref<10000xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<10000xf32>) {tile_sizes = #train.tiles<n = 4096>}
  func.return
}
