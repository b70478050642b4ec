// An scf.for annotated with #llvm.loop_annotation (dialect/upstream.py) keeps the annotation
// through npugrad's passes and upstream's lowering: convert-scf-to-cf and convert-cf-to-llvm put
// it on the loop's back edge, and mlir-translate emits it as !llvm.loop metadata that LLVM's
// unrollers obey.
// RUN: npugrad-opt %s -p convert-linalg-to-loops --stage llvm-ir | FileCheck %s
// Through the whole pipeline vectorize-elementwise makes each loop a vector loop and a scalar
// remainder: both carry the annotation.
// RUN: npugrad-opt %s --stage llvm-ir | FileCheck %s --check-prefix=VEC

func.func @fill(%a: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %z = arith.constant 0.0 : f32
  scf.for %i = %c0 to %n step %c1 {
    memref.store %z, %a[%i] : memref<?xf32>
  } {loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}
  func.return
}

func.func @scale(%a: memref<?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %two = arith.constant 2.0 : f32
  scf.for %i = %c0 to %n step %c1 {
    %x = memref.load %a[%i] : memref<?xf32>
    %y = arith.mulf %x, %two : f32
    memref.store %y, %a[%i] : memref<?xf32>
  } {loop_annotation = #llvm.loop_annotation<unroll = <count = 4 : i32>>}
  func.return
}

// CHECK-LABEL: define void @fill(
// CHECK:         store float 0x0000000000000000
// CHECK:         br label %{{[0-9]+}}, !llvm.loop ![[ROLLED:[0-9]+]]
// CHECK-LABEL: define void @scale(
// CHECK:         br label %{{[0-9]+}}, !llvm.loop ![[FOUR:[0-9]+]]
// CHECK-DAG:   ![[ROLLED]] = distinct !{![[ROLLED]], ![[DISABLE:[0-9]+]]}
// CHECK-DAG:   ![[DISABLE]] = !{!"llvm.loop.unroll.disable"}
// CHECK-DAG:   ![[FOUR]] = distinct !{![[FOUR]], ![[COUNT:[0-9]+]]}
// CHECK-DAG:   ![[COUNT]] = !{!"llvm.loop.unroll.count", i32 4}


// VEC-LABEL: define void @fill(
// VEC:         store <{{[0-9]+}} x float> zeroinitializer
// VEC:         br label %{{[0-9]+}}, !llvm.loop ![[ROLLED:[0-9]+]]
// VEC:         store float 0x0000000000000000
// VEC:         br label %{{[0-9]+}}, !llvm.loop ![[ROLLED]]
// VEC-LABEL: define void @scale(
// VEC:         br label %{{[0-9]+}}, !llvm.loop ![[FOUR:[0-9]+]]
// VEC:         br label %{{[0-9]+}}, !llvm.loop ![[FOUR]]
// VEC-DAG:   ![[ROLLED]] = distinct !{![[ROLLED]], ![[DISABLE:[0-9]+]]}
// VEC-DAG:   ![[DISABLE]] = !{!"llvm.loop.unroll.disable"}
// VEC-DAG:   ![[FOUR]] = distinct !{![[FOUR]], ![[COUNT:[0-9]+]]}
// VEC-DAG:   ![[COUNT]] = !{!"llvm.loop.unroll.count", i32 4}
