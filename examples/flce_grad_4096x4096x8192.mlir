// The linear cross-entropy gradient at BT=4096, H=4096, V=8192 (bf16, memory-saving mode): the
// size the tiling report is quoted at.
//   npugrad-opt examples/flce_grad_4096x4096x8192.mlir --target npu-a2 --report
func.func @flce(%g: memref<4096xf32>, %x: memref<4096x4096xbf16>, %w: memref<8192x4096xbf16>, %mask: memref<512xui8>,
                %t: memref<4096xi64>, %lm: memref<4096xf32>, %se: memref<4096xf32>,
                %gx: memref<4096x4096xbf16>, %gw: memref<8192x4096xbf16>) {
  train.fused_linear_cross_entropy_loss_grad grad(%g : memref<4096xf32>) input(%x : memref<4096x4096xbf16>)
      weight(%w : memref<8192x4096xbf16>) target_mask(%mask : memref<512xui8>) masked_target(%t : memref<4096xi64>)
      logits_max(%lm : memref<4096xf32>) sum_exp_logits(%se : memref<4096xf32>)
      -> input_grad_out(%gx : memref<4096x4096xbf16>) weight_grad_out(%gw : memref<8192x4096xbf16>)
  func.return
}
