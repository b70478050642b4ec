// NLL loss gradient, mean reduction, with per-class weights: 8 samples over 10 classes.
func.func @nll_loss_backward(%grad_output: memref<f32>, %self: memref<8x10xf32>, %target: memref<8xi64>,
                             %weight: memref<10xf32>, %total_weight: memref<1xf32>, %out: memref<8x10xf32>) {
  train.nll_loss_backward grad_output(%grad_output : memref<f32>) self(%self : memref<8x10xf32>)
      target(%target : memref<8xi64>) weight(%weight : memref<10xf32>)
      total_weight(%total_weight : memref<1xf32>) -> out(%out : memref<8x10xf32>) {reduction = 1 : i64}
  func.return
}
