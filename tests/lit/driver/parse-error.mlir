// Malformed IR: a located error (file:line:col, the line quoted, a caret), exit code 1, and no
// Python traceback, for each kind of parse error.
// RUN: not npugrad-opt %s --split-input-file 2>&1 | FileCheck %s
// CHECK-NOT: Traceback

// A missing operand: the parser stops at the first token that cannot start one.
func.func @missing_operand(%x: memref<4xf32>) {
  train.binary_cross_entropy_grad input_x(%x : memref<4xf32>) input_y(
  // CHECK: parse-error.mlir:[[# @LINE + 3]]:3: error: operand expected
  // CHECK-NEXT: {{^}}  func.return{{$}}
  // CHECK-NEXT: {{^}}  ^{{$}}
  func.return
}

// -----

// An unknown op is reported at its name, not at the next token (on the next line here).
func.func @unknown_op() {
  // CHECK: parse-error.mlir:[[# @LINE + 2]]:3: error: Operation train.no_such_op is not registered
  // CHECK-NEXT: {{^}}  train.no_such_op{{$}}
  train.no_such_op
  func.return
}

// -----

// A property of the wrong type is rejected while the op is built: located at the op.
func.func @property_type(%x: memref<4xf32>, %y: memref<4xf32>, %d: memref<1xf32>, %dx: memref<4xf32>) {
  // CHECK: parse-error.mlir:[[# @LINE + 1]]:3: error: 'train.binary_cross_entropy_grad' op Expected attribute i64 but got i32
  train.binary_cross_entropy_grad input_x(%x : memref<4xf32>) input_y(%y : memref<4xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<4xf32>) {reduction = 1 : i32}
  func.return
}

// -----

// An undefined SSA value is reported at its first use (xDSL reports it at the end of the input).
func.func @undefined_value(%x: memref<4xf32>, %d: memref<1xf32>, %dx: memref<4xf32>) {
  // CHECK: parse-error.mlir:[[# @LINE + 1]]:71: error: use of undefined value '%nope'
  train.binary_cross_entropy_grad input_x(%x : memref<4xf32>) input_y(%nope : memref<4xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<4xf32>)
  func.return
}

// -----

// An operand whose written type differs from its value's type.
func.func @type_mismatch(%x: memref<4xf32>, %y: memref<4xf32>, %d: memref<1xf32>, %dx: memref<4xf32>) {
  // CHECK: parse-error.mlir:[[# @LINE + 1]]:43: error: operand is used with type memref<4xf16>, but has been previously used or defined with type memref<4xf32>
  train.binary_cross_entropy_grad input_x(%x : memref<4xf16>) input_y(%y : memref<4xf32>)
      dloss(%d : memref<1xf32>) -> dx(%dx : memref<4xf32>)
  func.return
}

// -----

// An unclosed region: the error is at the end of the input, and says so.
func.func @unterminated() {
  func.return
// CHECK: parse-error.mlir:[[# @LINE + 2]]:1: error: unexpected end of input
// CHECK-NOT: Traceback
