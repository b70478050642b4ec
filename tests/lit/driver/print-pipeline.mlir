// --print-pipeline: the commands behind a stage instead of its IR, the xDSL passes as an
// `npugrad-opt -p` pipeline (options as the passes take them), then the upstream tools.
// RUN: npugrad-opt %s --stage train --print-pipeline | FileCheck %s --check-prefix=TRAIN
// RUN: npugrad-opt %s --stage loops --print-pipeline | FileCheck %s --check-prefix=LOOPS
// RUN: npugrad-opt %s --stage tiled --target npu-a2 --print-pipeline | FileCheck %s --check-prefix=TILED
// RUN: npugrad-opt %s --stage llvm-ir --no-fuse --print-pipeline | FileCheck %s --check-prefix=IR
// RUN: npugrad-opt %s --stage asm --cpu %inputs/avx2.toml --print-pipeline | FileCheck %s --check-prefix=ASM
// The xDSL part gives the stage itself (for a CPU of one core, whose token tiles the pipeline
// balances over that one core: balance_blocks is the cpu's core count):
// RUN: npugrad-opt %s -p 'fuse-linear-online-max-sum{cpu="%inputs/avx2.toml" balance_blocks=1},fuse-linear-cross-entropy-grad{cpu="%inputs/avx2.toml" wide_grad=true balance_blocks=1},distribute-over-cores,convert-train-to-loops,lower-npu-to-cpu' > %t.p
// RUN: npugrad-opt %s --stage loops --cpu %inputs/avx2.toml > %t.stage
// RUN: diff %t.p %t.stage
// The printed line with a target, as printed (no --target: xdsl-opt reads -t as its output format):
// RUN: npugrad-opt %s -p 'choose-tile-sizes{target="npu-a2"},fuse-linear-online-max-sum,fuse-linear-cross-entropy-grad,tile-for-target{target="npu-a2"},check-capacity{target="npu-a2"}' > %t.tp
// RUN: npugrad-opt %s --stage tiled --target npu-a2 > %t.tstage
// RUN: diff %t.tp %t.tstage

// TRAIN: npugrad-opt {{.*}}print-pipeline.mlir -p ''
// TRAIN-NOT: |

// Without a target the pipeline keeps G in float32 for the CPU's GEMMs (wide_grad) and spreads
// the token tiles evenly over the CPU's cores (balance_blocks, the host's core count here); with
// a target it leaves G in the input type for the target's units and the tiles as chosen.
// LOOPS: npugrad-opt {{.*}}print-pipeline.mlir -p 'fuse-linear-online-max-sum{balance_blocks=[[CORES:[1-9][0-9]*]]},fuse-linear-cross-entropy-grad{wide_grad=true balance_blocks=[[CORES]]},distribute-over-cores,convert-train-to-loops,lower-npu-to-cpu'{{$}}
// LOOPS-NOT: mlir-opt

// TILED: npugrad-opt {{.*}}print-pipeline.mlir -p 'choose-tile-sizes{target="npu-a2"},fuse-linear-online-max-sum,fuse-linear-cross-entropy-grad,tile-for-target{target="npu-a2"},check-capacity{target="npu-a2"}'{{$}}

// --no-fuse leaves the fusions out; the upstream part is the bindings' pipeline as mlir-opt takes it.
// IR: npugrad-opt {{.*}} -p distribute-over-cores,convert-train-to-loops,lower-npu-to-cpu,vectorize-contractions,vectorize-elementwise-loops,convert-linalg-to-loops \
// IR-NEXT: | mlir-opt --pass-pipeline='builtin.module(func.func(llvm-request-c-wrappers),canonicalize,cse,{{.*}},reconcile-unrealized-casts)' \
// IR-NEXT: | mlir-translate --mlir-to-llvmir{{$}}

// ASM: vectorize-contractions{target="{{.*}}avx2.toml"}
// ASM: | opt -O3 -disable-loop-unrolling -mcpu=x86-64-v3 \
// ASM-NEXT: | llc -O3 -mcpu=x86-64-v3{{$}}

func.func @bce(%x: memref<64xf32>, %y: memref<64xf32>, %dloss: memref<1xf32>, %dx: memref<64xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<64xf32>) input_y(%y : memref<64xf32>) dloss(%dloss : memref<1xf32>) -> dx(%dx : memref<64xf32>)
  func.return
}
