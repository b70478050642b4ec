// Embedding gradient: 4 sequences of 8 tokens, D = 16, into a 50-row table. Row 0 is padding
// (it stays zero) and each row receives the mean of its tokens' gradients.
func.func @embedding_dense_backward(%grad: memref<4x8x16xf32>, %indices: memref<4x8xi32>,
                                    %out: memref<50x16xf32>) {
  train.embedding_dense_backward grad(%grad : memref<4x8x16xf32>) indices(%indices : memref<4x8xi32>)
      -> out(%out : memref<50x16xf32>) {num_weights = 50 : i64, padding_idx = 0 : i64, scale_grad_by_freq = true}
  func.return
}
