// Binary cross-entropy gradient, mean reduction, with a per-element weight.
func.func @bce_grad(%x: memref<1000xf32>, %y: memref<1000xf32>, %dloss: memref<1xf32>,
                    %w: memref<1000xf32>, %dx: memref<1000xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<1000xf32>) input_y(%y : memref<1000xf32>)
      dloss(%dloss : memref<1xf32>) weight(%w : memref<1000xf32>) -> dx(%dx : memref<1000xf32>)
      {reduction = 1 : i64}
  func.return
}
