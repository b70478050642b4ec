// The bfloat16 linear cross-entropy gradient on a CPU with AMX (Inputs/amx.toml, whatever machine
// prints it): the three GEMMs' whole 32 x 32 blocks run on AMX tiles, four tdpbf16ps (16 x 16 x 32
// products each) per 32 reduction steps into four float32 accumulator tiles, which stay in tile
// registers over the reduction loop (C's tiles loaded before it, stored after it); the rows below
// the blocks and the steps after the last whole 32 run on vdpbf16ps, as on a CPU with AVX512-BF16
// alone (gemm_dot_bf16.mlir).
// RUN: npugrad-opt %examples/flce_grad_4096x4096x8192.mlir --stage vectorized --cpu %inputs/amx.toml | FileCheck %s --check-prefix=VEC
// RUN: npugrad-opt %examples/flce_grad_4096x4096x8192.mlir --stage asm --cpu %inputs/amx.toml | FileCheck %s

// In the vectorized stage, upstream's AMX dialect (LLVM 22's `amx`): C's four tiles loaded, then
// the reduction loop carrying them, per 32 steps A's two tiles (16 rows x 32 steps) and B's two
// (16 pairs of steps x 16 columns, from the packed panel of pairs), and four products, each after
// the loads of its operands: A0, B0, A0·B0, B1, A0·B1, A1, A1·B0, A1·B1.
// VEC:           "amx.tile_load"({{.*}}) <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (memref<?x?xf32, {{.*}}>, index, index) -> !amx.tile<16x16xf32>
// VEC-COUNT-3:   "amx.tile_load"{{.*}} -> !amx.tile<16x16xf32>
// VEC:           scf.for {{.*}} iter_args({{.*}}) -> (!amx.tile<16x16xf32>, !amx.tile<16x16xf32>, !amx.tile<16x16xf32>, !amx.tile<16x16xf32>) {
// VEC:           [[A0:%[0-9]+]] = "amx.tile_load"{{.*}} : (memref<?x?xbf16, {{.*}}>, index, index) -> !amx.tile<16x32xbf16>
// VEC-NEXT:      [[B0:%[0-9]+]] = "amx.tile_load"{{.*}} : (memref<{{[?0-9]+}}x128xbf16{{.*}}>, index, index) -> !amx.tile<16x32xbf16>
// VEC-NEXT:      "amx.tile_mulf"([[A0]], [[B0]], {{.*}}) : (!amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>) -> !amx.tile<16x16xf32>
// VEC-NEXT:      [[B1:%[0-9]+]] = "amx.tile_load"{{.*}} : (memref<{{[?0-9]+}}x128xbf16{{.*}}>, index, index) -> !amx.tile<16x32xbf16>
// VEC-NEXT:      "amx.tile_mulf"([[A0]], [[B1]], {{.*}})
// VEC-NEXT:      [[A1:%[0-9]+]] = "amx.tile_load"{{.*}} : (memref<?x?xbf16, {{.*}}>, index, index) -> !amx.tile<16x32xbf16>
// VEC-NEXT:      "amx.tile_mulf"([[A1]], [[B0]], {{.*}})
// VEC-NEXT:      "amx.tile_mulf"([[A1]], [[B1]], {{.*}})
// VEC:           scf.yield {{.*}} : !amx.tile<16x16xf32>, !amx.tile<16x16xf32>, !amx.tile<16x16xf32>, !amx.tile<16x16xf32>
// VEC-NEXT:      } {loop_annotation = #llvm.loop_annotation<unroll = <count = 2 : i32>>}
// VEC:           "amx.tile_store"({{.*}}) <{operandSegmentSizes = array<i32: 1, 2, 1, 0>}> : (memref<?x?xf32, {{.*}}>, index, index, !amx.tile<16x16xf32>) -> ()

// The kernel configures the tiles once, then GEMM 1's block: C's four tiles loaded, the loop
// unrolled by two (2 x 4 tdpbf16ps), C's tiles stored; vdpbf16ps for the rest. In each group of 32
// steps the loads and the products interleave (vectorize_contractions' amx_block): A0, B0, then
// A0·B0 before B1 is loaded, A0·B1 before A1 is loaded, then A1·B0 and A1·B1; no product waits for
// all four operand tiles.
// CHECK-LABEL: {{^}}flce:
// CHECK:           ldtilecfg
// CHECK-COUNT-4:   tileloadd {{.*}}, %tmm{{[0-3]}}
// CHECK:           tileloadd {{.*}}, %tmm[[A0:[4-7]]]
// CHECK-NOT:       tdpbf16ps
// CHECK:           tileloadd {{.*}}, %tmm[[B0:[4-7]]]
// CHECK-NOT:       tileloadd
// CHECK:           tdpbf16ps %tmm[[B0]], %tmm[[A0]], %tmm{{[0-3]}}
// CHECK-NOT:       tdpbf16ps
// CHECK:           tileloadd {{.*}}, %tmm[[B1:[4-7]]]
// CHECK-NOT:       tileloadd
// CHECK:           tdpbf16ps %tmm[[B1]], %tmm[[A0]], %tmm{{[0-3]}}
// CHECK-NOT:       tdpbf16ps
// CHECK:           tileloadd {{.*}}, %tmm[[A1:[4-7]]]
// CHECK-NOT:       tileloadd
// CHECK:           tdpbf16ps %tmm[[B0]], %tmm[[A1]], %tmm{{[0-3]}}
// CHECK-NEXT:      tdpbf16ps %tmm[[B1]], %tmm[[A1]], %tmm{{[0-3]}}
// CHECK-COUNT-4:   tdpbf16ps %tmm{{[4-7]}}, %tmm{{[4-7]}}, %tmm{{[0-3]}}
// CHECK-NOT:       tdpbf16ps
// CHECK-COUNT-4:   tilestored %tmm{{[0-3]}}, ({{%r[a-z0-9]+}},{{%r[a-z0-9]+}})
// CHECK:           vdpbf16ps {{.*}}%zmm{{[0-9]+}}, %zmm{{[0-9]+}}, %zmm{{[0-9]+}}
// CHECK-LABEL: {{^}}_mlir_ciface_flce:
