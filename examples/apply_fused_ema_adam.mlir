// One AdamW step (decoupled weight decay, bias correction) plus the parameter EMA, in place, on a
// 64x48 bfloat16 parameter, with LLM-style hyper-parameters as compile-time properties.
func.func @apply_fused_ema_adam(%grad: memref<64x48xbf16>, %step: memref<1xi64>, %var: memref<64x48xbf16>,
                                %m: memref<64x48xbf16>, %v: memref<64x48xbf16>, %s: memref<64x48xbf16>) {
  train.apply_fused_ema_adam grad(%grad : memref<64x48xbf16>) step(%step : memref<1xi64>)
      -> var(%var : memref<64x48xbf16>) m(%m : memref<64x48xbf16>) v(%v : memref<64x48xbf16>)
      s(%s : memref<64x48xbf16>) {lr = 1.0e-04 : f64, beta2 = 0.95 : f64, weight_decay = 0.01 : f64}
  func.return
}
