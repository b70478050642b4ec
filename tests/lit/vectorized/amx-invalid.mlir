// The AMX ops' verifiers (npugrad/dialect/upstream.py): a tile no larger than a tile register, a
// product of bf16 tiles into an f32 one whose shapes chain, loads and stores of a 2-D memref of the
// tile's element type, contiguous along its rows; each rejected at the op's line.
// RUN: npugrad-opt %s --split-input-file --verify-diagnostics

func.func @tile_too_wide(%m: memref<16x64xbf16>, %i: index) {
  // expected-error@+1 {{!amx.tile<16x64xbf16> is larger than a tile register (16 rows of 64 bytes)}}
  %t = "amx.tile_load"(%m, %i, %i) <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (memref<16x64xbf16>, index, index) -> !amx.tile<16x64xbf16>
  func.return
}

// -----
func.func @load_of_another_type(%m: memref<16x16xf32>, %i: index) {
  // expected-error@+1 {{'amx.tile_load' op reads a 2-D memref of bf16, got memref<16x16xf32>}}
  %t = "amx.tile_load"(%m, %i, %i) <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (memref<16x16xf32>, index, index) -> !amx.tile<16x32xbf16>
  func.return
}

// -----
func.func @load_of_a_column(%m: memref<16x32xbf16, strided<[1, 16]>>, %i: index) {
  // expected-error@+1 {{'amx.tile_load' op needs memref<16x32xbf16, strided<[1, 16]>> contiguous along its rows (a unit innermost stride)}}
  %t = "amx.tile_load"(%m, %i, %i) <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (memref<16x32xbf16, strided<[1, 16]>>, index, index) -> !amx.tile<16x32xbf16>
  func.return
}

// -----
func.func @product_shapes_do_not_chain(%m: memref<16x32xbf16>, %c: memref<16x16xf32>, %i: index) {
  %a = "amx.tile_load"(%m, %i, %i) <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (memref<16x32xbf16>, index, index) -> !amx.tile<8x32xbf16>
  %b = "amx.tile_load"(%m, %i, %i) <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (memref<16x32xbf16>, index, index) -> !amx.tile<16x32xbf16>
  %acc = "amx.tile_load"(%c, %i, %i) <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (memref<16x16xf32>, index, index) -> !amx.tile<16x16xf32>
  // expected-error@+1 {{'amx.tile_mulf' op shapes do not chain: !amx.tile<8x32xbf16> x !amx.tile<16x32xbf16> into !amx.tile<16x16xf32>}}
  %r = "amx.tile_mulf"(%a, %b, %acc) : (!amx.tile<8x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x16xf32>) -> !amx.tile<16x16xf32>
  func.return
}

// -----
func.func @product_into_bf16(%m: memref<16x32xbf16>, %i: index) {
  %a = "amx.tile_load"(%m, %i, %i) <{operandSegmentSizes = array<i32: 1, 2, 0>}> : (memref<16x32xbf16>, index, index) -> !amx.tile<16x32xbf16>
  // expected-error@+1 {{'amx.tile_mulf' op expects bf16 factors and an f32 accumulator}}
  %r = "amx.tile_mulf"(%a, %a, %a) : (!amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>, !amx.tile<16x32xbf16>) -> !amx.tile<16x32xbf16>
  func.return
}
