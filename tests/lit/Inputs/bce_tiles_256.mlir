// The BCE of tiled/compare.mlir with tiles of 256 elements (the other side of the comparison).
func.func @bce(%x: memref<10000xf32>, %y: memref<10000xf32>, %d: memref<1xf32>, %dx: memref<10000xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<10000xf32>) input_y(%y : memref<10000xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<10000xf32>) {tile_sizes = #train.tiles<n = 256>}
  func.return
}
