// convert-train-to-loops on embedding_dense_backward: a stable counting sort of the indices
// (count, prefix sum, place), then one pass per output row that adds the bucket's grad rows into
// a float32 accumulator in index order (the first to zero) and rounds once to out's type; with out_zeroed (a
// fresh, zeroed out the API allocated) a row whose bucket is empty is skipped.
// RUN: npugrad-opt %s --stage loops --no-distribute | FileCheck %s
// RUN: npugrad-opt %s -p convert-train-to-loops | FileCheck %s

// Dynamic shapes, 2-D i32 indices of another shape than grad's leading dims, f16 -> bf16,
// padding_idx = 3 and frequency scaling.
// CHECK-LABEL: func.func @scaled_padded
// CHECK-NOT:     grad.
// CHECK-DAG:     %[[NW:.*]] = arith.constant 10 : i64
// CHECK-DAG:     %[[PAD:.*]] = arith.constant 3 : i64
// CHECK-DAG:     %[[ZERO:.*]] = arith.constant 0.000000e+00 : f32
// D = 0: nothing to do, not even the scratch buffers.
// CHECK:         %[[HAS_D:.*]] = arith.cmpi ne, %[[D:.*]], %{{.*}} : index
// CHECK-NEXT:    scf.if %[[HAS_D]] {
// CHECK:           %[[NK:.*]] = arith.muli
// CHECK:           %[[OFF:.*]] = memref.alloc() {alignment = 64 : i64} : memref<12xindex>
// CHECK:           %[[PERM:.*]] = memref.alloc(%[[NK]]) {alignment = 64 : i64} : memref<?xindex>
// A mismatch of n and indices.numel leaves every bucket empty.
// CHECK:           %[[N:.*]] = arith.muli
// CHECK:           %[[SAME:.*]] = arith.cmpi eq, %[[N]], %[[NK]] : index
// CHECK:           scf.if %[[SAME]] {
// Count pass: sign-extend, one unsigned compare for both bounds, the padding compare.
// CHECK:             scf.for
// CHECK-NEXT:          scf.for
// CHECK-NEXT:            %[[K:.*]] = memref.load %{{.*}}[%{{.*}}, %{{.*}}] : memref<?x?xi32>
// CHECK-NEXT:            %[[K64:.*]] = arith.extsi %[[K]] : i32 to i64
// CHECK-NEXT:            %[[INB:.*]] = arith.cmpi ult, %[[K64]], %[[NW]] : i64
// CHECK-NEXT:            %[[NOPAD:.*]] = arith.cmpi ne, %[[K64]], %[[PAD]] : i64
// CHECK-NEXT:            %[[VALID:.*]] = arith.andi %[[INB]], %[[NOPAD]] : i1
// CHECK-NEXT:            %[[ROW:.*]] = arith.index_cast %[[K64]] : i64 to index
// CHECK-NEXT:            scf.if %[[VALID]] {
// CHECK-NEXT:              %[[SLOT:.*]] = arith.addi %[[ROW]], %{{.*}} : index
// CHECK-NEXT:              %[[C:.*]] = memref.load %[[OFF]][%[[SLOT]]] : memref<12xindex>
// CHECK-NEXT:              %[[C1:.*]] = arith.addi %[[C]], %{{.*}} : index
// CHECK-NEXT:              memref.store %[[C1]], %[[OFF]][%[[SLOT]]] : memref<12xindex>
// Prefix sum, then the place pass stores each flat position into its bucket.
// CHECK:             scf.for
// CHECK:               arith.addi
// CHECK:               memref.store %{{.*}}, %[[OFF]]
// CHECK:             scf.for
// CHECK:               arith.cmpi ne, %{{.*}}, %[[PAD]] : i64
// CHECK:               scf.if
// CHECK:                 %[[FLAT:.*]] = arith.addi
// CHECK:                 %[[AT:.*]] = memref.load %[[OFF]]
// CHECK:                 memref.store %[[FLAT]], %[[PERM]][%[[AT]]] : memref<?xindex>
// Per row: count = bucket length; the bucket's first grad row / count added to zero (the sum's
// first addition, with no pass zeroing the accumulator first), or zeros for an empty bucket;
// then the others accumulated in index order; rounded once.
// CHECK:           %[[ACC:.*]] = memref.alloc(%[[D]]) {alignment = 64 : i64} : memref<?xf32>
// CHECK:           scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT:        %[[LO:.*]] = memref.load %[[OFF]][%[[R]]] : memref<12xindex>
// CHECK:             %[[HI:.*]] = memref.load %[[OFF]]
// CHECK-NEXT:        %[[USED:.*]] = arith.cmpi ne, %[[LO]], %[[HI]] : index
// CHECK-NEXT:        %[[LEN:.*]] = arith.subi %[[HI]], %[[LO]] : index
// CHECK-NEXT:        %[[LEN64:.*]] = arith.index_cast %[[LEN]] : index to i64
// CHECK-NEXT:        %[[CNT:.*]] = arith.sitofp %[[LEN64]] : i64 to f32
// CHECK-NEXT:        scf.if %[[USED]] {
// CHECK-NEXT:          %[[I0:.*]] = memref.load %[[PERM]][%[[LO]]] : memref<?xindex>
// CHECK:               scf.for %[[J0:.*]] = %{{.*}} to %[[D]] step
// CHECK-NEXT:            %[[G0:.*]] = memref.load
// CHECK-NEXT:            %[[G032:.*]] = arith.extf %[[G0]] : f16 to f32
// CHECK-NEXT:            %[[S0:.*]] = arith.divf %[[G032]], %[[CNT]] : f32
// CHECK-NEXT:            %[[A0:.*]] = arith.addf %[[ZERO]], %[[S0]] : f32
// CHECK-NEXT:            memref.store %[[A0]], %[[ACC]][%[[J0]]] : memref<?xf32>
// CHECK:             } else {
// CHECK-NEXT:          scf.for %[[JZ:.*]] = %{{.*}} to %[[D]] step
// CHECK-NEXT:            memref.store %[[ZERO]], %[[ACC]][%[[JZ]]] : memref<?xf32>
// CHECK:             %[[NEXT:.*]] = arith.addi %[[LO]], %{{.*}} : index
// CHECK-NEXT:        %[[FROM:.*]] = arith.minui %[[NEXT]], %[[HI]] : index
// CHECK-NEXT:        scf.for %[[P:.*]] = %[[FROM]] to %[[HI]] step
// CHECK-NEXT:          %[[I:.*]] = memref.load %[[PERM]][%[[P]]] : memref<?xindex>
// CHECK-NEXT:          %[[I1:.*]] = arith.remui %[[I]], %{{.*}} : index
// CHECK-NEXT:          %[[I0:.*]] = arith.divui %[[I]], %{{.*}} : index
// CHECK-NEXT:          scf.for %[[J:.*]] = %{{.*}} to %[[D]] step
// CHECK-NEXT:            %[[G:.*]] = memref.load %{{.*}}[%[[I0]], %[[I1]], %[[J]]] : memref<?x?x?xf16>
// CHECK-NEXT:            %[[G32:.*]] = arith.extf %[[G]] : f16 to f32
// CHECK-NEXT:            %[[S:.*]] = arith.divf %[[G32]], %[[CNT]] : f32
// CHECK-NEXT:            %[[A:.*]] = memref.load %[[ACC]][%[[J]]] : memref<?xf32>
// CHECK-NEXT:            %[[A1:.*]] = arith.addf %[[A]], %[[S]] : f32
// CHECK-NEXT:            memref.store %[[A1]], %[[ACC]][%[[J]]] : memref<?xf32>
// CHECK:             scf.for %[[J2:.*]] = %{{.*}} to %[[D]] step
// CHECK-NEXT:          %[[V:.*]] = memref.load %[[ACC]][%[[J2]]] : memref<?xf32>
// CHECK-NEXT:          %[[B:.*]] = arith.truncf %[[V]] : f32 to bf16
// CHECK-NEXT:          memref.store %[[B]], %{{.*}}[%[[R]], %[[J2]]] : memref<10x?xbf16>
// CHECK:           memref.dealloc %[[ACC]] : memref<?xf32>
// CHECK-NEXT:      memref.dealloc %[[PERM]] : memref<?xindex>
// CHECK-NEXT:      memref.dealloc %[[OFF]] : memref<12xindex>
func.func @scaled_padded(%g: memref<?x?x?xf16>, %i: memref<?x?xi32>, %out: memref<10x?xbf16>) {
  train.embedding_dense_backward grad(%g : memref<?x?x?xf16>) indices(%i : memref<?x?xi32>)
      -> out(%out : memref<10x?xbf16>) {num_weights = 10 : i64, padding_idx = 3 : i64, scale_grad_by_freq = true}
  func.return
}

// Static f32 out: the sums go into a float32 scratch row too, then the row is copied out (no
// rounding): `out` is only written, a stream that can go past the caches (vectorize-elementwise-
// loops); i64 indices need no extension; no padding compare, no scaling, no shape guards.
// CHECK-LABEL: func.func @plain_f32
// CHECK-NOT:     scf.if %{{.*}} {
// CHECK:         memref.alloc() {alignment = 64 : i64} : memref<7xindex>
// CHECK:         %[[PERM:.*]] = memref.alloc() {alignment = 64 : i64} : memref<7xindex>
// CHECK:         %[[K:.*]] = memref.load %{{.*}}[%{{.*}}] : memref<7xi64>
// CHECK-NEXT:    arith.cmpi ult, %[[K]], %{{.*}} : i64
// CHECK-NEXT:    arith.index_cast %[[K]] : i64 to index
// CHECK-NEXT:    scf.if
// CHECK:         memref.store %{{.*}}, %[[PERM]]
// CHECK:         %[[ACC:.*]] = memref.alloc() {alignment = 64 : i64} : memref<16xf32>
// CHECK:         scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK:           scf.if
// CHECK:           } else {
// CHECK-NEXT:        scf.for %[[J0:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT:          memref.store %{{.*}}, %[[ACC]][%[[J0]]] : memref<16xf32>
// CHECK:           scf.for
// CHECK-NEXT:        %[[I:.*]] = memref.load
// CHECK-NEXT:        scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT:          %[[G:.*]] = memref.load %{{.*}}[%[[I]], %[[J]]] : memref<7x16xf32>
// CHECK-NEXT:          %[[A:.*]] = memref.load %[[ACC]][%[[J]]] : memref<16xf32>
// CHECK-NEXT:          %[[S:.*]] = arith.addf %[[A]], %[[G]] : f32
// CHECK-NEXT:          memref.store %[[S]], %[[ACC]][%[[J]]] : memref<16xf32>
// CHECK:           scf.for %[[J2:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT:        %[[V:.*]] = memref.load %[[ACC]][%[[J2]]] : memref<16xf32>
// CHECK-NEXT:        memref.store %[[V]], %{{.*}}[%[[R]], %[[J2]]] : memref<5x16xf32>
// CHECK-NOT:     memref.load %{{.*}} : memref<5x16xf32>
// CHECK-NOT:     arith.divf
// CHECK-NOT:     arith.truncf
// CHECK:         func.return
func.func @plain_f32(%g: memref<7x16xf32>, %i: memref<7xi64>, %out: memref<5x16xf32>) {
  train.embedding_dense_backward grad(%g : memref<7x16xf32>) indices(%i : memref<7xi64>)
      -> out(%out : memref<5x16xf32>) {num_weights = 5 : i64}
  func.return
}

// D = 0: out has no elements, nothing is emitted.
// CHECK-LABEL: func.func @no_columns
// CHECK-NEXT:    func.return
func.func @no_columns(%g: memref<4x0xf32>, %i: memref<4xi32>, %out: memref<9x0xf32>) {
  train.embedding_dense_backward grad(%g : memref<4x0xf32>) indices(%i : memref<4xi32>)
      -> out(%out : memref<9x0xf32>) {num_weights = 9 : i64}
  func.return
}

// out_zeroed: the row's body runs only where its bucket is not empty; the rest of out keeps the
// zeros it came with.
// CHECK-LABEL: func.func @zeroed_out
// CHECK:           %[[ACC:.*]] = memref.alloc(%{{.*}}) {alignment = 64 : i64} : memref<?xf32>
// CHECK-NEXT:      scf.for %[[R:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT:        %[[LO:.*]] = memref.load %[[OFF:.*]][%[[R]]] : memref<6xindex>
// CHECK:             %[[HI:.*]] = memref.load %[[OFF]]
// CHECK-NEXT:        %[[USED:.*]] = arith.cmpi ne, %[[LO]], %[[HI]] : index
// CHECK-NEXT:        scf.if %[[USED]] {
// CHECK-NEXT:          memref.load
// CHECK-NEXT:          scf.for
// CHECK-NEXT:            memref.load %g
// CHECK-NEXT:            arith.addf
// CHECK-NEXT:            memref.store %{{.*}}, %[[ACC]][%{{.*}}] : memref<?xf32>
// CHECK-NOT:           else
// CHECK:               scf.for %{{.*}} = %{{.*}} to %[[HI]] step
// CHECK:                   arith.addf
// CHECK:               scf.for %[[J:.*]] = %{{.*}} to %{{.*}} step
// CHECK-NEXT:            %[[V:.*]] = memref.load %[[ACC]][%[[J]]] : memref<?xf32>
// CHECK-NEXT:            memref.store %[[V]], %{{.*}}[%[[R]], %[[J]]] : memref<4x?xf32>
// CHECK-NEXT:          }
// CHECK-NEXT:        }
// CHECK-NEXT:      }
func.func @zeroed_out(%g: memref<?x?xf32>, %i: memref<?xi64>, %out: memref<4x?xf32>) {
  train.embedding_dense_backward grad(%g : memref<?x?xf32>) indices(%i : memref<?xi64>)
      -> out(%out : memref<4x?xf32>) {num_weights = 4 : i64, out_zeroed = true}
  func.return
}
