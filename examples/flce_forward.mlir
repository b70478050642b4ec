// The forward of a vocabulary-parallel LM head on one shard [1000, 1300) of the vocabulary: the
// statistics of the logits X·Wᵀ (row max, sum of exponentials, target logit), the bit-packed
// target mask and masked targets, in one pass over W, no BT×V buffer.
func.func @flce_forward(%x: memref<100x48xbf16>, %w: memref<300x48xbf16>, %t: memref<100xi64>,
                        %m: memref<100xf32>, %s: memref<100xf32>, %p: memref<100xf32>,
                        %mask: memref<13xui8>, %mt: memref<100xi64>) {
  train.fused_linear_online_max_sum input(%x : memref<100x48xbf16>) weight(%w : memref<300x48xbf16>)
      target(%t : memref<100xi64>) -> logits_max_local_out(%m : memref<100xf32>)
      sum_exp_logits_local_out(%s : memref<100xf32>) predicted_logits_local_out(%p : memref<100xf32>)
      target_mask_out(%mask : memref<13xui8>) masked_target_out(%mt : memref<100xi64>)
      {vocab_start_index = 1000 : i64, vocab_end_index = 1300 : i64}
  func.return
}
