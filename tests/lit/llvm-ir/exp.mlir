// exp in the LLVM IR (lowering/vector_math.py): LLVM would call libm's expf once per lane of a
// vector exp; every float32 llvm.exp, scalar or vector, becomes a call to an inlined function of
// straight-line code instead (range reduction with FMAs, a degree-6 polynomial, 2^n as two
// exponent-field factors, NaN passed through), one definition per width. The asm has no call.
// RUN: npugrad-opt %s --stage llvm-ir --cpu %inputs/avx2.toml | FileCheck %s
// RUN: npugrad-opt %s --stage asm --cpu %inputs/avx2.toml | FileCheck %s --check-prefix=ASM

// CHECK-LABEL: define void @exp_loop(
// The vector body (8 lanes on AVX2) and the scalar tail call the same arithmetic.
// CHECK:         call <8 x float> @npugrad.exp.v8f32(<8 x float> %{{.*}})
// CHECK:         call float @npugrad.exp.f32(float %{{.*}})
// CHECK-NOT:     @llvm.exp.
// CHECK-LABEL: define internal float @npugrad.exp.f32(float %x)
// CHECK:         call float @llvm.maxnum.f32(float %x,
// CHECK:         call float @llvm.rint.f32(
// CHECK:         %nan = fcmp uno float %x, %x
// CHECK-NEXT:    %out = select i1 %nan, float %x, float %e
// CHECK-LABEL: define internal <8 x float> @npugrad.exp.v8f32(<8 x float> %x)
// CHECK:         call <8 x float> @llvm.rint.v8f32(
// CHECK-COUNT-7: call <8 x float> @llvm.fma.v8f32(
// CHECK:         ashr <8 x i32> %ni,
// CHECK:         bitcast <8 x i32> %b1 to <8 x float>

// ASM-LABEL: exp_loop:
// ASM-NOT:     expf
// ASM:         vroundps
// ASM:         vfmadd{{[0-9]+}}ps {{.*}}%ymm
// ASM-NOT:     expf
// ASM:         .size	exp_loop,

func.func @exp_loop(%x: memref<?xf32>, %y: memref<?xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %n = memref.dim %x, %c0 : memref<?xf32>
  scf.for %i = %c0 to %n step %c1 {
    %v = memref.load %x[%i] : memref<?xf32>
    %e = math.exp %v : f32
    memref.store %e, %y[%i] : memref<?xf32>
  }
  func.return
}
