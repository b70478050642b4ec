// Linear cross-entropy gradient, memory-saving mode, float32, hand-set tile sizes.
func.func @flce(%g: memref<100xf32>, %x: memref<100x48xf32>, %w: memref<520x48xf32>, %mask: memref<100xi1>,
                %t: memref<100xi32>, %lm: memref<100xf32>, %se: memref<100xf32>,
                %gx: memref<100x48xf32>, %gw: memref<520x48xf32>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<100xf32>) input(%x : memref<100x48xf32>)
      weight(%w : memref<520x48xf32>) target_mask(%mask : memref<100xi1>) masked_target(%t : memref<100xi32>)
      logits_max(%lm : memref<100xf32>) sum_exp_logits(%se : memref<100xf32>)
      -> input_grad_out(%gx : memref<100x48xf32>) weight_grad_out(%gw : memref<520x48xf32>)
      {tile_sizes = #train.tiles<bt = 32, v = 128>}
  func.return
}
