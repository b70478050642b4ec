// Linear cross-entropy gradient on one tensor-parallel rank, memory-saving mode: 16 tokens,
// hidden size 32, a 256-row vocabulary shard, bf16 activations and weights, bit-packed mask.
func.func @flce_grad(%grad: memref<16xf32>, %x: memref<16x32xbf16>, %w: memref<256x32xbf16>,
                     %mask: memref<2xui8>, %target: memref<16xi64>,
                     %max: memref<16xf32>, %sum: memref<16xf32>,
                     %dx: memref<16x32xbf16>, %dw: memref<256x32xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%grad : memref<16xf32>) input(%x : memref<16x32xbf16>)
      weight(%w : memref<256x32xbf16>) target_mask(%mask : memref<2xui8>) masked_target(%target : memref<16xi64>)
      logits_max(%max : memref<16xf32>) sum_exp_logits(%sum : memref<16xf32>)
      -> input_grad_out(%dx : memref<16x32xbf16>) weight_grad_out(%dw : memref<256x32xbf16>)
  func.return
}
