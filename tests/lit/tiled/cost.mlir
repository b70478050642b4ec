// The cost model's figures in the report (npugrad/analysis/cost.py), computed by hand for one
// small case on npu-a2 (figures from npugrad/targets/npu-a2.toml).
// RUN: npugrad-opt %s --target npu-a2 --report | FileCheck %s

// BCE gradient on 1000 float32 elements, one tile of 1000 (all of them, set by hand), on one block.
// Copies: x, y, weight in (3 x 4000 B), dx out (4000 B); global traffic = the arguments but dloss.
// Work: 11 element operations per element (loads, stores and arithmetic of the loop body) = 11000.
// Cycles, one stage, copies overlapping work (double buffering), on the busiest core:
//   gm -> ub:   12000 B / 56.06 B per cycle + 3 copies x 24 cycles = 214.06 + 72 = 286.06
//   vector:     11000 ops / 64 per cycle    + 1 loop x 12 cycles   = 171.88 + 12 = 183.88
//   ub -> gm:    4000 B / 104.7             + 1 x 24               =  38.20 + 24 =  62.20
//   gm shared:  16000 B / 888.9 (all cores)                                       =  18.00
// The slowest, gm -> ub, is the stage: 286.1 cycles / 1.8 GHz = 158.9 ns.
// Compute bound: 11000 / 64 / 20 cores = 8.594 cycles; compulsory traffic: the 16004 B of the
// arguments over 888.9 B per cycle = 18.00 cycles; 286.1 / 18.00 = 15.89x the larger.
// Intensity: no contraction, so no FLOP line.
// CHECK:      // global traffic: 16000 B = 1.00x the 16004 B of the arguments
// CHECK-NEXT: // work (all blocks): vector 11000 ops on f32
// CHECK-NEXT: // modelled time on npu-a2 at 1.8 GHz (copies overlap work: a stage is its slowest term; figures: {{.*}}cited there):
// CHECK-NEXT: //   stage 1: gm -> ub 286.1, vector 183.9, ub -> gm 62.2, gm (shared) 18 cycles
// CHECK-NEXT: //   predicted: 286.1 cycles = 158.9 ns, bound by gm -> ub (100% of the time)
// CHECK-NEXT: //   compute bound: 8.594 cycles = 4.774 ns (vector 8.594); compulsory traffic: 18 cycles = 10 ns; predicted / lower bound = 15.89x
func.func @bce_grad(%x: memref<1000xf32>, %y: memref<1000xf32>, %dloss: memref<1xf32>,
                    %w: memref<1000xf32>, %dx: memref<1000xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<1000xf32>) input_y(%y : memref<1000xf32>)
      dloss(%dloss : memref<1xf32>) weight(%w : memref<1000xf32>) -> dx(%dx : memref<1000xf32>)
      {reduction = 1 : i64, tile_sizes = #train.tiles<n = 1000>}
  func.return
}

// A 64x64x64 bf16 contraction tile on the cube: 2 x 64^3 = 524288 FLOP at 8192 per cycle = 64
// cycles + 6 of instruction head = 70; its operands come gm -> l1 -> l0a/l0b (no direct path on
// npu-a2: the note says so): 8192 B / 75 + 24 + 8192 B / 245 + 24 = 190.7 (l0a),
// 8192 / 75 + 24 + 8192 / 122.5 + 24 = 224.1 (l0b); the accumulator in and out over the
// FixPipe 16384 / 38.89 + 24 = 445.3 (l0c -> gm), and gm -> l0c has no route (16 B per cycle:
// 16384 / 16 = 1024). The stage is its slowest: 1024 cycles. Global traffic 8192 + 8192 +
// 16384 + 16384 = 49152 B, so 524288 / 49152 = 10.67 FLOP per global byte.
// CHECK-LABEL: // report of @gemm
// CHECK:       // work (all blocks): matrix 524288 FLOP on bf16
// CHECK:       //   stage 1: gm -> l0c 1024, l0c -> gm 445.3, gm -> l0b 224.1, gm -> l0a 190.7 cycles
// CHECK:       //   predicted: 1024 cycles = 568.9 ns, bound by gm -> l0c (100% of the time)
// CHECK:       //   intensity: 10.67 FLOP per global byte (5.243e+05 FLOP)
// CHECK:       //   note: gm -> l0a is not a path of npu-a2: costed as gm -> l1 -> l0a
// CHECK:       //   note: gm -> l0c is no route of npu-a2: costed at 16 B/cycle
func.func @gemm(%a: memref<64x64xbf16>, %b: memref<64x64xbf16>, %c: memref<64x64xf32>) {
  %la = npu.alloc_local : memref<64x64xbf16, #npu.mem<l0a>>
  %lb = npu.alloc_local : memref<64x64xbf16, #npu.mem<l0b>>
  %lc = npu.alloc_local : memref<64x64xf32, #npu.mem<l0c>>
  npu.copy %a, %la : memref<64x64xbf16>, memref<64x64xbf16, #npu.mem<l0a>>
  npu.copy %b, %lb : memref<64x64xbf16>, memref<64x64xbf16, #npu.mem<l0b>>
  npu.copy %c, %lc : memref<64x64xf32>, memref<64x64xf32, #npu.mem<l0c>>
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d2)>, affine_map<(d0, d1, d2) -> (d2, d1)>, affine_map<(d0, d1, d2) -> (d0, d1)>], iterator_types = ["parallel", "parallel", "reduction"]} ins(%la, %lb : memref<64x64xbf16, #npu.mem<l0a>>, memref<64x64xbf16, #npu.mem<l0b>>) outs(%lc : memref<64x64xf32, #npu.mem<l0c>>) {
  ^bb0(%p: bf16, %q: bf16, %r: f32):
    %pe = arith.extf %p : bf16 to f32
    %qe = arith.extf %q : bf16 to f32
    %m = arith.mulf %pe, %qe : f32
    %s = arith.addf %r, %m : f32
    linalg.yield %s : f32
  }
  npu.copy %lc, %c : memref<64x64xf32, #npu.mem<l0c>>, memref<64x64xf32>
  func.return
}
