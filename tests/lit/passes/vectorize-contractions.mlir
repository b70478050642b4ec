// vectorize-contractions: a contraction linalg.generic becomes a register-blocked micro-kernel.
// With 32 registers of 16 float32 lanes (Inputs/zmm.toml) the block is 6 rows x 4 vectors: 24
// accumulators from zero, carried through the reduction loop, then added to C once: all 24 loads of
// C, then the 24 stores. Every cache line of C the block may touch is prefetched when the block
// starts, for reading into the L2 (locality 2: B's 64 KiB panel, which the reduction loop streams
// first, is more than half the 48 KiB L1; c_prefetch): a row of 64 float32 columns covers 4 lines
// of 64 bytes when C is line-aligned and 5 when it is not, so columns j, j+16, j+32, j+48 and j+63.
// The reduction runs in chunks of 256 steps: the panel of B a column block's row blocks share, 256
// rows of 64 float32 columns (64 KiB), is packed contiguously first (on the heap, once per
// function, freed before it returns): a sixteenth of the 1 MiB L2, where every row block reads it
// again (half the 48 KiB L1 would give 96 steps, and C's 24 loads and stores every 96 steps of 24
// FMAs). Each row the pack reads prefetches the same row's line of the next panel (its last column,
// j + 127, clamped to N - 1): B's rows a row stride apart are too many streams for the hardware
// prefetchers.
// RUN: npugrad-opt %s -p 'vectorize-contractions{target="%inputs/avx512.toml"}' | FileCheck %s
// A CPU with AVX512-BF16 (Inputs/avx512bf16.toml) multiplies bfloat16 pairs instead, two
// reduction steps per x86vector.avx512.dot (vdpbf16ps): the panels of B hold KC/2 rows of pairs, KC
// twice as long for the same 64 KiB (512 steps).
// RUN: npugrad-opt %s -p 'vectorize-contractions{target="%inputs/avx512bf16.toml"}' | FileCheck %s --check-prefix=DOT
// 256-bit vectors (Inputs/avx2.toml), 6 x 2 blocks: the same decisions, the whole blocks' reduction
// loop unrolled by two, the row tail's left rolled.
// RUN: npugrad-opt %s -p 'vectorize-contractions{target="%inputs/avx2.toml"}' | FileCheck %s --check-prefix=AVX2
// AVX2:       scf.if
// AVX2-COUNT-12: vector.fma
// AVX2:       } {loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}
// AVX2:       scf.for
// AVX2-COUNT-12: vector.fma
// AVX2:       } {loop_annotation = #llvm.loop_annotation<unroll = <count = 2 : i32>>}
// Where the target gives a matrix rate and a copy path from the L2 into the L1 (as the host's
// defaults and `npugrad calibrate`'s files do: Inputs/avx512_paths.toml), each block whose C lines
// were asked into the L2 when it started asks for them again into the L1, late_c_prefetch's steps
// before its reduction loop ends: the copy path's 32 cycles of latency and 6 x 4 lines at 16 bytes
// a cycle (128 cycles) over the 12 cycles of a step's 24 FMAs at 64 FLOP a cycle, 11 steps. The
// loop runs in two parts, the prefetches between them, the second from where the first stopped
// with its sums; both parts keep the loop's unroll annotation. The masked edges do neither.
// RUN: npugrad-opt %s -p 'vectorize-contractions{target="%inputs/avx512_paths.toml"}' | FileCheck %s --check-prefix=LATE
// LATE-LABEL:    func.func @gemm
// LATE:          %[[T:.*]] = arith.constant 11 : index
// The row tail's block (its loops rolled), then the whole blocks'.
// LATE:          scf.if
// LATE:            } {loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}
// LATE-COUNT-30:   memref.prefetch %c[%{{.*}}, %{{.*}}], read, locality<3>, data : memref<?x?xf32>
// LATE-NEXT:       %sum{{.*}} = scf.for
// LATE:            } {loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}
// LATE:          scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// LATE-COUNT-30:   memref.prefetch %c[%{{.*}}, %{{.*}}], read, locality<2>, data : memref<?x?xf32>
// LATE-NEXT:       %[[LEFT:.*]] = arith.subi %[[K1:.*]], %[[T]] : index
// LATE-NEXT:       %[[SPLIT:.*]] = arith.maxsi %[[LEFT]], %[[K0:.*]] : index
// LATE-NEXT:       %[[P0:[0-9a-z_]+]], {{.*}} = scf.for %k{{.*}} = %[[K0]] to %[[SPLIT]] step %{{.*}} iter_args(%acc{{.*}} = %[[ZERO:.*]], {{.*}})
// LATE-COUNT-24:     vector.fma
// LATE:            } {loop_annotation = #llvm.loop_annotation<unroll = <count = 2 : i32>>}
// LATE-COUNT-30:   memref.prefetch %c[%{{.*}}, %{{.*}}], read, locality<3>, data : memref<?x?xf32>
// LATE-NEXT:       %sum{{.*}} = scf.for %k{{.*}} = %[[SPLIT]] to %[[K1]] step %{{.*}} iter_args(%acc{{.*}} = %[[P0]], {{.*}})
// LATE-COUNT-24:     vector.fma
// LATE:            } {loop_annotation = #llvm.loop_annotation<unroll = <count = 2 : i32>>}
// LATE-NEXT:       vector.load %c[%[[I]], %{{.*}}]
// LATE-NOT:        locality<3>, data : memref<?x?xf32>
// LATE-LABEL:    func.func @gemm_bf16_transposed_lhs
// avx512.toml, without those figures, asks once (the CHECK lines below).
// A target without vector registers keeps its contractions as they are.
// RUN: npugrad-opt %s -p 'vectorize-contractions{target=npu-a2}' | FileCheck %s --check-prefix=NPU
// In the pipeline: the stage after `tiled`, every GEMM of the fused nest vectorised for the host.

// CHECK-LABEL: func.func @gemm
// CHECK-NEXT:    %b_panel = memref.alloc() {alignment = 64 : i64} : memref<256x64xf32>
// CHECK-DAG:     %[[C0:.*]] = arith.constant 0 : index
// CHECK-DAG:     %[[WIDE:.*]] = arith.constant 64 : index
// CHECK-DAG:     %[[MR:.*]] = arith.constant 6 : index
// CHECK-DAG:     %[[LANES:.*]] = arith.constant 16 : index
// CHECK-DAG:     %[[KC:.*]] = arith.constant 256 : index
// CHECK-DAG:     %[[C63:.*]] = arith.constant 63 : index
// CHECK-DAG:     %[[C127:.*]] = arith.constant 127 : index
// The blocks start at C's first column that begins a 64-byte line (NumPy's large arrays start
// 16 bytes past one): the address of C's first element, from its pointer and offset, at run time.
// CHECK:         %{{.*}}, %[[OFFSET:.*]], %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} = memref.extract_strided_metadata %c
// CHECK-NEXT:    %[[BASE:.*]] = "memref.extract_aligned_pointer_as_index"(%c)
// CHECK-NEXT:    %[[OFFSET_BYTES:.*]] = arith.muli %[[OFFSET]], %{{.*}} : index
// CHECK-NEXT:    %[[FIRST_BYTE:.*]] = arith.addi %[[BASE]], %[[OFFSET_BYTES]] : index
// CHECK-NEXT:    %[[PAST:.*]] = arith.remui %[[FIRST_BYTE]], %[[WIDE]] : index
// CHECK-NEXT:    %[[GAP_:.*]] = arith.subi %[[WIDE]], %[[PAST]] : index
// CHECK-NEXT:    %[[GAP:.*]] = arith.remui %[[GAP_]], %[[WIDE]] : index
// CHECK-NEXT:    %[[GAP_COLUMNS:.*]] = arith.divui %[[GAP]], %{{.*}} : index
// CHECK-NEXT:    %head = arith.minsi %[[N:.*]], %[[GAP_COLUMNS]] : index
// CHECK-NEXT:    scf.for %[[K0:.*]] = %[[C0]] to %{{.*}} step %[[KC]] {
// CHECK-NEXT:      %[[K0_KC:.*]] = arith.addi %[[K0]], %[[KC]] : index
// CHECK-NEXT:      %[[K1:.*]] = arith.minsi %[[K0_KC]], %{{.*}} : index
// CHECK-NEXT:      %[[AFTER_HEAD:.*]] = arith.subi %[[N]], %head : index
// CHECK-NEXT:      %[[REM:.*]] = arith.remui %[[AFTER_HEAD]], %[[WIDE]] : index
// CHECK-NEXT:      %[[WHOLE:.*]] = arith.subi %[[AFTER_HEAD]], %[[REM]] : index
// CHECK-NEXT:      %[[BLOCKS_END:.*]] = arith.addi %head, %[[WHOLE]] : index
// CHECK-NEXT:      scf.for %[[J:.*]] = %head to %[[BLOCKS_END]] step %[[WIDE]] {
// The panel: rows k0..k1 of B's 64 columns from j, packed, the next panel's line prefetched.
// CHECK-NEXT:        %[[LAST:.*]] = arith.subi %{{.*}}, %{{.*}} : index
// CHECK-NEXT:        %[[J127:.*]] = arith.addi %[[J]], %[[C127]] : index
// CHECK-NEXT:        %[[AHEAD:.*]] = arith.minui %[[J127]], %[[LAST]] : index
// CHECK-NEXT:        scf.for %[[KP:.*]] = %[[K0]] to %[[K1]] step %{{.*}} {
// CHECK-NEXT:          %[[ROW:.*]] = arith.subi %[[KP]], %[[K0]] : index
// CHECK-NEXT:          %[[V:.*]] = vector.load %b[%[[KP]], %[[J]]] : memref<?x?xf32>, vector<16xf32>
// CHECK-NEXT:          vector.store %[[V]], %b_panel[%[[ROW]], %[[C0]]] : memref<256x64xf32>, vector<16xf32>
// CHECK-COUNT-3:       vector.store %{{.*}}, %b_panel[%[[ROW]], %{{.*}}] : memref<256x64xf32>, vector<16xf32>
// CHECK-NEXT:          memref.prefetch %b[%[[KP]], %[[AHEAD]]], read, locality<3>, data : memref<?x?xf32>
// CHECK-NEXT:        }
// The rows left over (M mod 6) first, in one block of 6 rows from the first row left, %[[FULL]]:
// rows past M - 1 are row M - 1 again, computed and stored like it, after every load of C. Its
// values are dead before the whole blocks start (emitted after them, the tail's row indices kept
// registers busy through the blocks' reduction loops: a loop bound reloaded from the stack on
// every step, 10 % more samples in GEMM 2's loop on a Zen 3). No block of 4, 2 or 1 rows.
// CHECK-NEXT:        %[[TAIL:.*]] = arith.cmpi ult, %[[FULL:.*]], %[[M:.*]] : index
// CHECK-NEXT:        scf.if %[[TAIL]] {
// CHECK-NEXT:          %[[LASTROW:.*]] = arith.subi %[[M]], %{{.*}} : index
// CHECK-COUNT-5:       arith.addi %[[FULL]], %{{.*}} : index
// CHECK-COUNT-5:       arith.minui %{{.*}}, %[[LASTROW]] : index
// CHECK:               scf.for %{{.*}} = %[[K0]] to %[[K1]] step %{{.*}} iter_args(
// CHECK-COUNT-24:        vector.fma
// The tail's reduction loop is left rolled; the whole blocks' is unrolled by two (below): LLVM's
// unrollers do what the annotations say and nothing else (lowering/machine_code.py).
// CHECK:               } {loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}
// CHECK-NEXT:          vector.load %c[%[[FULL]], %[[J]]] : memref<?x?xf32>, vector<16xf32>
// CHECK-COUNT-23:      vector.load %c
// CHECK-NOT:           vector.load %c
// CHECK-COUNT-24:      vector.store %{{.*}}, %c
// CHECK-NEXT:        }
// CHECK-NEXT:        scf.for %[[I:.*]] = %[[C0]] to %[[FULL]] step %[[MR]] {
// CHECK:               %[[J16:.*]] = arith.addi %[[J]], %[[LANES]] : index
// CHECK-NEXT:          %[[J32:.*]] = arith.addi %[[J]], %{{.*}} : index
// CHECK-NEXT:          %[[J48:.*]] = arith.addi %[[J]], %{{.*}} : index
// CHECK-NEXT:          %[[J63:.*]] = arith.addi %[[J]], %[[C63]] : index
// CHECK-NEXT:          memref.prefetch %c[%[[I]], %[[J]]], read, locality<2>, data : memref<?x?xf32>
// CHECK-NEXT:          memref.prefetch %c[%[[I]], %[[J16]]], read, locality<2>, data : memref<?x?xf32>
// CHECK-NEXT:          memref.prefetch %c[%[[I]], %[[J32]]], read, locality<2>, data : memref<?x?xf32>
// CHECK-NEXT:          memref.prefetch %c[%[[I]], %[[J48]]], read, locality<2>, data : memref<?x?xf32>
// CHECK-NEXT:          memref.prefetch %c[%[[I]], %[[J63]]], read, locality<2>, data : memref<?x?xf32>
// CHECK-COUNT-25:      memref.prefetch %c[%{{.*}}, %{{.*}}], read, locality<2>, data : memref<?x?xf32>
// CHECK-NOT:           memref.prefetch
// CHECK-NOT:           vector.load %c
// CHECK:               %sum_24, {{.*}}, %sum_47 = scf.for %[[K:.*]] = %[[K0]] to %[[K1]] step %{{.*}} iter_args(%acc_24 = %[[ZERO:.*]], %acc_25 = %[[ZERO]], {{.*}}, %acc_47 = %[[ZERO]]) -> (vector<16xf32>{{.*}}) {
// CHECK-NEXT:          %[[R:.*]] = arith.subi %[[K]], %[[K0]] : index
// CHECK-COUNT-4:       vector.load %b_panel[%[[R]], %{{.*}}] : memref<256x64xf32>, vector<16xf32>
// CHECK-NEXT:          %[[A:.*]] = memref.load %a[%[[I]], %[[K]]] : memref<?x?xf32>
// CHECK-NEXT:          %[[AV:.*]] = vector.broadcast %[[A]] : f32 to vector<16xf32>
// CHECK-COUNT-4:       vector.fma %[[AV]], %{{.*}}, %{{.*}} : vector<16xf32>
// CHECK-COUNT-5:       vector.broadcast
// CHECK:               scf.yield
// CHECK-NEXT:        } {loop_annotation = #llvm.loop_annotation<unroll = <count = 2 : i32>>}
// CHECK-NEXT:        %[[C00:.*]] = vector.load %c[%[[I]], %[[J]]] : memref<?x?xf32>, vector<16xf32>
// CHECK-NEXT:        %[[S00:.*]] = arith.addf %[[C00]], %sum_24 : vector<16xf32>
// CHECK-COUNT-23:    vector.load %c[%{{.*}}, %{{.*}}] : memref<?x?xf32>, vector<16xf32>
// CHECK-NOT:         vector.load
// CHECK:             vector.store %[[S00]], %c[%[[I]], %[[J]]] : memref<?x?xf32>, vector<16xf32>
// CHECK-COUNT-23:    vector.store %{{.*}}, %c[%{{.*}}, %{{.*}}] : memref<?x?xf32>, vector<16xf32>
// CHECK-NEXT:        }
// CHECK-NEXT:    }
// The columns before the blocks, [0, head), then those after them, [blocks_end, N): one loop
// body for both, one vector at a time (a 64-byte line is one vector of 16 lanes), masked to
// the columns left.
// CHECK:         scf.for %[[EDGE:.*]] = %[[C0]] to %{{.*}} step %{{.*}} {
// CHECK-NEXT:      %[[BEFORE:.*]] = arith.cmpi eq, %[[EDGE]], %[[C0]] : index
// CHECK-NEXT:      %[[LO:.*]] = arith.select %[[BEFORE]], %[[C0]], %[[BLOCKS_END]] : index
// CHECK-NEXT:      %[[HI:.*]] = arith.select %[[BEFORE]], %head, %[[N]] : index
// CHECK-NEXT:      scf.for %[[J1:.*]] = %[[LO]] to %[[HI]] step %[[LANES]] {
// CHECK-NEXT:        %[[LEFT:.*]] = arith.subi %[[HI]], %[[J1]] : index
// CHECK-NEXT:        %[[MASK:.*]] = vector.create_mask %[[LEFT]] : vector<16xi1>
// B's columns packed first, masked (zeros past them), into the panel the row blocks read: in
// place, each row block read B's rows again.
// CHECK-NEXT:        scf.for %[[KE:.*]] = %[[K0]] to %[[K1]] step %{{.*}} {
// CHECK-NEXT:          %[[RE:.*]] = arith.subi %[[KE]], %[[K0]] : index
// CHECK-NEXT:          %[[BE:.*]] = vector.maskedload %b[%[[KE]], %[[J1]]], %[[MASK]], %{{.*}} : memref<?x?xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK-NEXT:          vector.store %[[BE]], %b_panel[%[[RE]], %[[C0]]] : memref<256x64xf32>, vector<16xf32>
// CHECK-NEXT:        }
// CHECK-NOT:         vector.maskedload %b
// Every row in one loop of blocks as the row tail's (rows past M - 1 clamped to it): a block's
// reduction loop is rolled here, so a whole block would differ from it in nothing but the row
// indices it clamps.
// CHECK-NEXT:        %[[LASTE:.*]] = arith.subi %[[M]], %{{.*}} : index
// CHECK-NEXT:        scf.for %[[IE:.*]] = %[[C0]] to %[[M]] step %[[MR]] {
// CHECK-COUNT-5:       arith.addi %[[IE]], %{{.*}} : index
// CHECK-COUNT-5:       arith.minui %{{.*}}, %[[LASTE]] : index
// CHECK:               vector.fma
// CHECK:             } {loop_annotation = #llvm.loop_annotation<unroll = <disable = true>>}
// CHECK-NEXT:        vector.maskedload %c[%[[IE]], %[[J1]]], %[[MASK]], %{{.*}} : memref<?x?xf32>, vector<16xi1>, vector<16xf32> into vector<16xf32>
// CHECK:             vector.maskedstore %c[%{{.*}}, %[[J1]]], %[[MASK]], %{{.*}} : memref<?x?xf32>, vector<16xi1>, vector<16xf32>
// CHECK-NOT:         scf.for
// CHECK:           }
// CHECK-NOT:     linalg.generic
// CHECK:         func.return

// bfloat16 operands widen to float32 as they are loaded (B once, into its panel); A read
// transposed (A[k, i]) is widened where it is broadcast.
// CHECK-LABEL: func.func @gemm_bf16_transposed_lhs
// CHECK:         %[[B:.*]] = vector.load %b[%{{.*}}, %{{.*}}] : memref<64x100xbf16>, vector<16xbf16>
// CHECK-NEXT:    %[[BF:.*]] = arith.extf %[[B]] : vector<16xbf16> to vector<16xf32>
// CHECK-NEXT:    vector.store %[[BF]], %b_panel
// CHECK:         scf.for %[[K:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(
// CHECK:           vector.load %b_panel
// CHECK:           %[[A:.*]] = memref.load %a[%[[K]], %{{.*}}] : memref<64x50xbf16>
// CHECK-NEXT:      %[[AF:.*]] = arith.extf %[[A]] : bf16 to f32
// CHECK-NEXT:      vector.broadcast %[[AF]] : f32 to vector<16xf32>
// CHECK-NOT:     linalg.generic
// CHECK:         func.return

// With the dot product, A read [k, i] is packed as pairs [q, i]: rows k and k + 1 of A
// interleaved, 16 columns at a time.
// DOT-LABEL:  func.func @gemm_bf16_transposed_lhs
// DOT:          %a_pairs = memref.alloc() {alignment = 64 : i64} : memref<256x50xi32>
// DOT:          %[[R0:.*]] = vector.load %a[%{{.*}}, %{{.*}}] : memref<64x50xbf16>, vector<16xbf16>
// DOT-NEXT:     %[[R1:.*]] = vector.load %a[%{{.*}}, %{{.*}}] : memref<64x50xbf16>, vector<16xbf16>
// DOT-NEXT:     %[[Z:.*]] = arith.select %{{.*}}, %[[R1]], %{{.*}} : vector<16xbf16>
// DOT-NEXT:     %[[I:.*]] = vector.shuffle %[[R0]], %[[Z]] [0, 16, 1, 17, {{.*}}] : vector<16xbf16>, vector<16xbf16>
// DOT-NEXT:     %[[W:.*]] = vector.bitcast %[[I]] : vector<32xbf16> to vector<16xi32>
// DOT-NEXT:     vector.store %[[W]], %a_pairs[%{{.*}}, %{{.*}}] : memref<256x50xi32>, vector<16xi32>
// DOT:          memref.load %a_pairs[%[[Q:.*]], %{{.*}}] : memref<256x50xi32>
// DOT:          x86vector.avx512.dot

// A narrower A read [i, k] is widened into a float32 buffer (M x KC) at the start of each
// reduction chunk, a vector at a time along k (the last k % 16 one by one); the row blocks then
// broadcast float32 from it, as from a float32 A.
// CHECK-LABEL: func.func @gemm_f16
// CHECK:         %a_wide = memref.alloc() {alignment = 64 : i64} : memref<50x256xf32>
// CHECK:         scf.for %[[K0:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           scf.for %[[I:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        scf.for %[[K:.*]] = %[[K0]] to %{{.*}} step %{{.*}} {
// CHECK-NEXT:          %[[AH:.*]] = vector.load %a[%[[I]], %[[K]]] : memref<50x64xf16>, vector<16xf16>
// CHECK-NEXT:          %[[AF:.*]] = arith.extf %[[AH]] : vector<16xf16> to vector<16xf32>
// CHECK-NEXT:          %[[COL:.*]] = arith.subi %[[K]], %[[K0]] : index
// CHECK-NEXT:          vector.store %[[AF]], %a_wide[%[[I]], %[[COL]]] : memref<50x256xf32>, vector<16xf32>
// CHECK-NEXT:        }
// CHECK-NEXT:        scf.for %[[KT:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:          %[[AT:.*]] = memref.load %a[%[[I]], %[[KT]]] : memref<50x64xf16>
// CHECK-NEXT:          %[[ATF:.*]] = arith.extf %[[AT]] : f16 to f32
// CHECK-NEXT:          %[[COLT:.*]] = arith.subi %[[KT]], %[[K0]] : index
// CHECK-NEXT:          memref.store %[[ATF]], %a_wide[%[[I]], %[[COLT]]] : memref<50x256xf32>
// CHECK:           iter_args(
// CHECK:             %[[W:.*]] = memref.load %a_wide[%{{.*}}, %{{.*}}] : memref<50x256xf32>
// CHECK-NEXT:        vector.broadcast %[[W]] : f32 to vector<16xf32>
// CHECK-NOT:         memref.load %a[
// CHECK:         memref.dealloc %a_wide : memref<50x256xf32>
// CHECK-NEXT:    memref.dealloc %b_panel : memref<256x64xf32>
// CHECK-NEXT:    func.return

// B's rows float32 and 512 bytes apart (a tile the nest packed itself) are packed too: read in
// place, its 64 rows would fall into 8 of the L1's sets.
// CHECK-LABEL: func.func @gemm_narrow_b
// CHECK:         %b_panel = memref.alloc() {alignment = 64 : i64} : memref<256x64xf32>
// CHECK:         vector.load %b[%{{.*}}, %{{.*}}] : memref<64x128xf32>, vector<16xf32>
// CHECK-NEXT:    vector.store %{{.*}}, %b_panel
// CHECK:         func.return

// Not a multiply-accumulate: left alone.
// CHECK-LABEL: func.func @not_a_contraction
// CHECK:         linalg.generic
// CHECK-NOT:     vector.fma

// B the same in every iteration of the loop around the contraction (a function argument the
// function never writes, as W is for the token loop of the linear cross-entropy nests): all of its
// full panels are packed once, before the loop, into %b_panels[p, k, :] = B[k, first + 64p :
// first + 64p + 64] (float32), freed after it; the micro-kernel reads panel (j - first) / 64 and
// packs nothing in the loop. C is there before the loop too (an argument): the panels start at
// its first column that begins a 64-byte line, %first, as the micro-kernel's own blocks do.
// Only where the loop runs more than once (%repeats, at run time: a pack ahead of one iteration
// holds all of B for nothing); otherwise no panel is packed ahead and the micro-kernel packs its
// own, chunk by chunk, from C's first line (%head).
// CHECK-LABEL: func.func @gemm_in_a_loop_b_invariant
// CHECK-DAG:     %[[WIDE:.*]] = arith.constant 64 : index
// CHECK-DAG:     %[[K:.*]] = memref.dim %b, %{{.*}} : memref<?x?xbf16>
// CHECK-DAG:     %[[N:.*]] = memref.dim %b, %{{.*}} : memref<?x?xbf16>
// CHECK:         %[[SECOND:.*]] = arith.addi %c0, %c1 : index
// CHECK-NEXT:    %repeats = arith.cmpi slt, %[[SECOND]], %n : index
// CHECK:         memref.extract_strided_metadata %c
// CHECK:         %first = arith.minsi %[[N]], %{{.*}} : index
// CHECK-NEXT:    %[[AFTER_FIRST:.*]] = arith.subi %[[N]], %first : index
// CHECK-NEXT:    %[[ALL:.*]] = arith.divui %[[AFTER_FIRST]], %[[WIDE]] : index
// CHECK-NEXT:    %[[NP:.*]] = arith.select %repeats, %[[ALL]], %{{.*}} : index
// CHECK-NEXT:    %b_panels = memref.alloc(%[[NP]], %[[K]]) {alignment = 64 : i64} : memref<?x?x64xf32>
// CHECK-NEXT:    scf.for %[[P:.*]] = %{{.*}} to %[[NP]] step %{{.*}} {
// CHECK-NEXT:      %[[J0_:.*]] = arith.muli %[[P]], %[[WIDE]] : index
// CHECK-NEXT:      %[[J0:.*]] = arith.addi %[[J0_]], %first : index
// CHECK:           %[[AHEAD:.*]] = arith.minui %{{.*}}, %{{.*}} : index
// CHECK-NEXT:      scf.for %[[KP:.*]] = %{{.*}} to %[[K]] step %{{.*}} {
// CHECK-NEXT:        memref.prefetch %b[%[[KP]], %[[AHEAD]]], read, locality<3>, data : memref<?x?xbf16>
// CHECK-NEXT:        %[[V:.*]] = vector.load %b[%[[KP]], %[[J0]]] : memref<?x?xbf16>, vector<16xbf16>
// CHECK-NEXT:        %[[VF:.*]] = arith.extf %[[V]] : vector<16xbf16> to vector<16xf32>
// CHECK-NEXT:        vector.store %[[VF]], %b_panels[%[[P]], %[[KP]], %{{.*}}] : memref<?x?x64xf32>, vector<16xf32>
// CHECK-COUNT-3:     vector.store %{{.*}}, %b_panels[%[[P]], %[[KP]], %{{.*}}] : memref<?x?x64xf32>, vector<16xf32>
// One copy of the column blocks for both cases (columns_either): each block reads a view, its
// hoisted panel where %repeats, else the chunk's own panel, packed right there; B's step k is
// row k + %delta of it (0, or minus the chunk's first step), and the blocks start at %first or
// %head as each case's own copy did.
// CHECK:         scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NOT:       %b_panel[
// CHECK:           %head = arith.minsi
// CHECK:           scf.for %[[K0:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:             %start = arith.select %repeats, %first, %head : index
// CHECK:             %[[OWN:.*]] = arith.subi %{{.*}}, %[[K0]] : index
// CHECK-NEXT:        %delta = arith.select %repeats, %{{.*}}, %[[OWN]] : index
// CHECK-NEXT:        scf.for %[[J:.*]] = %start to %{{.*}} step %{{.*}} {
// CHECK-NEXT:          %b_view = scf.if %repeats -> (memref<?x64xf32, strided<[64, 1], offset: ?>>) {
// CHECK-NEXT:            %[[JF:.*]] = arith.subi %[[J]], %start : index
// CHECK-NEXT:            %[[PJ:.*]] = arith.divui %[[JF]], %{{.*}} : index
// CHECK:                 %[[HV:.*]] = memref.subview %b_panels[%[[PJ]], 0, 0] [1, %{{.*}}, 64] [1, 1, 1]
// CHECK-NEXT:            scf.yield %[[HV]]
// CHECK-NEXT:          } else {
// CHECK-NOT:             %b_panels
// CHECK:                 vector.store %{{.*}}, %b_panel[
// CHECK:                 %[[OV:.*]] = "memref.cast"(%b_panel) : (memref<256x64xf32>) -> memref<?x64xf32, strided<[64, 1], offset: ?>>
// CHECK-NEXT:            scf.yield %[[OV]]
// CHECK:               scf.for %[[KK:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(
// CHECK-NEXT:            %[[AT:.*]] = arith.addi %[[KK]], %delta : index
// CHECK-COUNT-4:         vector.load %b_view[%[[AT]], %{{.*}}] : memref<?x64xf32, strided<[64, 1], offset: ?>>, vector<16xf32>
// CHECK-NOT:       scf.if %repeats
// CHECK:         memref.dealloc %b_panels : memref<?x?x64xf32>
// CHECK-NEXT:    memref.dealloc %b_panel : memref<256x64xf32>
// CHECK-NEXT:    func.return

// B written in the loop, or an argument the function writes, or a view made in the loop: its
// panel is packed in the loop, chunk by chunk, as for a contraction outside any loop.
// CHECK-LABEL: func.func @gemm_in_a_loop_b_written
// CHECK-NOT:     %b_panels
// CHECK:         scf.for
// CHECK:           vector.store %{{.*}}, %b_panel[
// CHECK-LABEL: func.func @gemm_in_a_loop_b_written_elsewhere
// CHECK-NOT:     %b_panels
// CHECK:         vector.store %{{.*}}, %b_panel[
// CHECK-LABEL: func.func @gemm_in_a_loop_b_a_view_of_the_loop
// CHECK-NOT:     %b_panels
// CHECK:         vector.store %{{.*}}, %b_panel[
// CHECK-LABEL: func.func @gemm_in_a_loop_b_fresh
// CHECK:         %[[BUF:.*]] = memref.alloc() : memref<64x128xf32>
// CHECK:         %b_panels = memref.alloc
// CHECK:         scf.for

// B read transposed (B[j, k]: GEMM 1 reading W's tile as it is stored, v x h), invariant in the
// loop: its panels are packed once, before it, in 16 x 16 blocks (16 lanes): each of the block's
// rows a vector load along a row of B, the block transposed in registers (4 rounds of 16
// vector.shuffle, row i with row i + 8 into its low and high halves), each column stored as one
// k of the panel; the last K % 16 columns a column of the panel at a time (one loop over the
// panel's 64 columns, each reading its row of B along k: one scalar load per step, not 16 per
// step, which LLVM's loop strength reduction took most of its time over). The micro-kernel is
// the same.
// CHECK-LABEL: func.func @gemm_in_a_loop_b_transposed
// CHECK:         %[[K:.*]] = memref.dim %b, %{{.*}} : memref<?x?xf32>
// CHECK:         %b_panels = memref.alloc(%{{.*}}, %[[K]]) {alignment = 64 : i64} : memref<?x?x64xf32>
// CHECK:         scf.for %[[P:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           %[[BLOCKS:.*]] = arith.divui %[[K]], %[[L:.*]] : index
// CHECK-NEXT:      %[[REST:.*]] = arith.muli %[[BLOCKS]], %[[L]] : index
// CHECK-NEXT:      scf.for %[[K0:.*]] = %{{.*}} to %[[REST]] step %[[L]] {
// CHECK:             %[[R0:.*]] = vector.load %b[%{{.*}}, %[[K0]]] : memref<?x?xf32>, vector<16xf32>
// CHECK-COUNT-15:    vector.load %b[%{{.*}}, %[[K0]]] : memref<?x?xf32>, vector<16xf32>
// CHECK-NEXT:        vector.shuffle %[[R0]], %{{.*}} [0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23] : vector<16xf32>, vector<16xf32>
// CHECK-NEXT:        vector.shuffle %[[R0]], %{{.*}} [8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31] : vector<16xf32>, vector<16xf32>
// CHECK-COUNT-62:    vector.shuffle
// CHECK-NEXT:        vector.store %{{.*}}, %b_panels[%[[P]], %[[K0]], %{{.*}}] : memref<?x?x64xf32>, vector<16xf32>
// CHECK-COUNT-15:    vector.store %{{.*}}, %b_panels[%[[P]], %{{.*}}, %{{.*}}] : memref<?x?x64xf32>, vector<16xf32>
// CHECK:           scf.for %[[COL:.*]] = %{{.*}} to %[[W:.*]] step %{{.*}} {
// CHECK-NEXT:        %[[COLUMN:.*]] = arith.addi %{{.*}}, %[[COL]] : index
// CHECK-NEXT:        scf.for %[[KP:.*]] = %[[REST]] to %[[K]] step %{{.*}} {
// CHECK-NEXT:          %[[E0:.*]] = memref.load %b[%[[COLUMN]], %[[KP]]] : memref<?x?xf32>
// CHECK-NEXT:          memref.store %[[E0]], %b_panels[%[[P]], %[[KP]], %[[COL]]] : memref<?x?x64xf32>
// CHECK-NEXT:        }
// Where the loop runs once, a block packs the micro-kernel's own panel (the view's other case),
// a lane at a time (a vector store per 16 elements: a column at a time, a store per element,
// was slower); the columns at the edges pack it a column at a time, each along its row of B
// (at most column N - 1).
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NOT:       %b_panel[
// CHECK:           scf.for %[[PJ:.*]] = %start to %{{.*}} step %{{.*}} {
// CHECK-NEXT:        %b_view = scf.if %repeats
// CHECK:               memref.subview %b_panels[
// CHECK:             } else {
// CHECK-NEXT:          scf.for %[[PK:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK-NEXT:            arith.subi %[[PK]], %{{.*}} : index
// CHECK-NEXT:            %[[PB:.*]] = memref.load %b[%[[PJ]], %[[PK]]] : memref<?x?xf32>
// CHECK-NEXT:            vector.insert %[[PB]], %{{.*}} [0] : f32 into vector<16xf32>
// CHECK:             vector.load %b_view[
// CHECK:             %[[EB:.*]] = memref.load %b[%[[EJL:.*]], %[[EK:.*]]] : memref<?x?xf32>
// CHECK-NEXT:        %[[ER:.*]] = arith.subi %[[EK]], %{{.*}} : index
// CHECK-NEXT:        memref.store %[[EB]], %b_panel[%[[ER]], %{{.*}}] : memref<256x64xf32>
// CHECK:         memref.dealloc %b_panels

// B rows [t, t + size) of every column of a base (%x) that the loop around B's loop does not
// change (GEMM 3 of the linear cross-entropy gradient: X's token tile, in the token loop, in the
// vocabulary loop): all of the base's panels are packed once, before the outer loop, if its
// float32 size is at most the largest local level per core (1 MiB here), a condition at run
// time; the micro-kernel reads row t + k of them, or packs per call where the base is larger.
// CHECK-LABEL: func.func @gemm_rows_of_an_invariant_base
// CHECK:         %[[BUDGET:.*]] = arith.constant 1048576 : index
// CHECK:         %first = arith.minsi
// CHECK-NEXT:    arith.subi %{{.*}}, %first : index
// CHECK-NEXT:    %[[NP:.*]] = arith.divui
// CHECK:         %[[SIZE:.*]] = arith.muli %{{.*}}, %{{.*}} : index
// CHECK-NEXT:    %[[BYTES:.*]] = arith.muli %[[SIZE]], %{{.*}} : index
// CHECK-NEXT:    %fits = arith.cmpi ule, %[[BYTES]], %[[BUDGET]] : index
// CHECK-NEXT:    %[[P:.*]] = arith.select %fits, %[[NP]], %{{.*}} : index
// CHECK-NEXT:    %b_panels = memref.alloc(%[[P]], %{{.*}}) {alignment = 64 : i64} : memref<?x?x64xf32>
// CHECK:           vector.store %{{.*}}, %b_panels[
// CHECK:         scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:           scf.for %[[T:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// CHECK:               %delta = arith.select %fits, %[[T]], %{{.*}} : index
// CHECK-NEXT:          scf.for %{{.*}} = %start to %{{.*}} step %{{.*}} {
// CHECK-NEXT:            %b_view = scf.if %fits
// CHECK:                   memref.subview %b_panels[
// CHECK:                 } else {
// CHECK:                   vector.store %{{.*}}, %b_panel[
// CHECK:                 scf.for %[[KK:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(
// CHECK-NEXT:              %[[ROW:.*]] = arith.addi %[[KK]], %delta : index
// CHECK-NEXT:              vector.load %b_view[%[[ROW]], %{{.*}}] : memref<?x64xf32, strided<[64, 1], offset: ?>>, vector<16xf32>
// CHECK-NOT:         scf.if %fits
// CHECK:         memref.dealloc %b_panels : memref<?x?x64xf32>

// NPU-LABEL: func.func @gemm
// NPU:         linalg.generic
// NPU-NOT:     vector.


// Two bfloat16 operands on a CPU with the dot product: A read [i, k] holds its pairs
// (A[i, k], A[i, k + 1]) as they are, so nothing packs it: each pair is one i32 read in place
// and broadcast. The pack of B interleaves rows k and k + 1 over the chunk's whole pairs, no
// select in the loop; an odd count's last row comes alone after them (a loop of 0 or 1
// iterations), its second half zero: never a read past the end. Each pair of rows prefetches
// both rows' line of the next panel into the L2 (locality 2: the chunk's 512 rows of B ask for
// 32 KiB of lines, more than half the 48 KiB L1; ahead_locality), where float32's 256 rows go
// into the L1 (locality 3, above). The 6 x 4 block is 24 dots a
// pair of steps. Where the chunk's count is
// odd, its last step comes alone after the whole pairs (a loop of 0 or 1 iterations from where
// they end), A's scalar widened to an i32 with a zero second half: never a read past the row.
// The masked columns at the edge run on dots too: their pairs are packed into the panel a column
// at a time (columns past N - 1 read at N - 1, for lanes the masked stores drop), then a block
// one vector wide takes 6 dots a pair of steps, C loaded and stored masked. Without the dot
// product (avx512.toml), the same GEMM widens to float32.
// DOT-LABEL:  func.func @gemm_bf16_dot
// DOT:          %b_panel = memref.alloc() {alignment = 64 : i64} : memref<256x128xbf16>
// DOT-NOT:      a_pairs
// DOT:          %[[ZERO:.*]] = arith.constant dense<0.000000e+00> : vector<16xbf16>
// DOT:          scf.for
// DOT:          scf.for
// DOT:          arith.divui
// DOT:          %[[PAIRS:.*]] = arith.divui %{{.*}}, %{{.*}} : index
// DOT-NEXT:     scf.for %[[PQ:.*]] = %{{.*}} to %[[PAIRS]] step %{{.*}} {
// DOT-NEXT:       %[[PQ2:.*]] = arith.addi %[[PQ]], %[[PQ]] : index
// DOT-NEXT:       %[[K:.*]] = arith.addi %{{.*}}, %[[PQ2]] : index
// DOT-NEXT:       %[[K1:.*]] = arith.addi %[[K]], %{{.*}} : index
// DOT-NEXT:       %[[R0:.*]] = vector.load %b[%[[K]], %{{.*}}] : memref<?x?xbf16>, vector<16xbf16>
// DOT-NEXT:       %[[R1:.*]] = vector.load %b[%[[K1]], %{{.*}}] : memref<?x?xbf16>, vector<16xbf16>
// DOT-NEXT:       %[[I:.*]] = vector.shuffle %[[R0]], %[[R1]] [0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31] : vector<16xbf16>, vector<16xbf16>
// DOT-NEXT:       vector.store %[[I]], %b_panel[%[[PQ]], %{{.*}}] : memref<256x128xbf16>, vector<32xbf16>
// DOT-NOT:        arith.select
// DOT:            memref.prefetch %b[%[[K]], %[[AHEAD:.*]]], read, locality<2>, data : memref<?x?xbf16>
// DOT-NEXT:       memref.prefetch %b[%[[K1]], %[[AHEAD]]], read, locality<2>, data : memref<?x?xbf16>
// DOT-NEXT:     }
// DOT-NEXT:     scf.for %[[PT:.*]] = %[[PAIRS]] to %{{.*}} step %{{.*}} {
// DOT-NEXT:       %[[PT2:.*]] = arith.addi %[[PT]], %[[PT]] : index
// DOT-NEXT:       %[[KT:.*]] = arith.addi %{{.*}}, %[[PT2]] : index
// DOT-NEXT:       %[[RT:.*]] = vector.load %b[%[[KT]], %{{.*}}] : memref<?x?xbf16>, vector<16xbf16>
// DOT-NEXT:       vector.shuffle %[[RT]], %[[ZERO]] [0, 16,
// DOT-NEXT:       vector.store %{{.*}}, %b_panel[%[[PT]], %{{.*}}] : memref<256x128xbf16>, vector<32xbf16>
// DOT-NOT:        memref.prefetch
// DOT:          }
// The blocks of 6 rows: one loop over all M rows, each block as the row tail's (rows past
// M - 1 clamped to it): the pairs' loop is not unrolled, so a whole block would differ from it in
// nothing else.
// DOT:          %[[LASTROW:.*]] = arith.subi %[[M:.*]], %{{.*}} : index
// DOT-NEXT:     scf.for %{{.*}} = %{{.*}} to %[[M]] step %{{.*}} {
// DOT-COUNT-5:    arith.minui %{{.*}}, %[[LASTROW]] : index
// DOT:          scf.for %[[Q:.*]] = %{{.*}} to %[[WHOLE:.*]] step %{{.*}} iter_args(
// DOT-COUNT-4:    vector.load %b_panel[%[[Q]], %{{.*}}] : memref<256x128xbf16>, vector<32xbf16>
// DOT:            %[[AP:.*]] = vector.load %a[%{{.*}}, %{{.*}}] : memref<?x?xbf16>, vector<2xbf16>
// DOT-NEXT:       %[[AW:.*]] = vector.bitcast %[[AP]] : vector<2xbf16> to vector<1xi32>
// DOT-NEXT:       %[[AI:.*]] = vector.extract %[[AW]][0] : i32 from vector<1xi32>
// DOT-NEXT:       %[[AB:.*]] = vector.broadcast %[[AI]] : i32 to vector<16xi32>
// DOT-NEXT:       %[[A:.*]] = vector.bitcast %[[AB]] : vector<16xi32> to vector<32xbf16>
// DOT-NEXT:       x86vector.avx512.dot %acc, %[[A]], %{{.*}} : vector<32xbf16> -> vector<16xf32>
// DOT-COUNT-23:   x86vector.avx512.dot
// DOT-NEXT:       scf.yield
// DOT:          scf.for %[[QT:.*]] = %[[WHOLE]] to %{{.*}} step %{{.*}} iter_args(
// DOT:            %[[AS:.*]] = memref.load %a[%{{.*}}, %{{.*}}] : memref<?x?xbf16>
// DOT-NEXT:       %[[AH:.*]] = arith.bitcast %[[AS]] : bf16 to i16
// DOT-NEXT:       %[[AT:.*]] = arith.extui %[[AH]] : i16 to i32
// DOT-NEXT:       vector.broadcast %[[AT]] : i32 to vector<16xi32>
// DOT:            x86vector.avx512.dot
// DOT-COUNT-23:   x86vector.avx512.dot
// DOT-NEXT:       scf.yield
// DOT-NOT:      vector.fma
// DOT:          %[[COL:.*]] = arith.minsi %{{.*}}, %{{.*}} : index
// DOT:          memref.load %b[%{{.*}}, %[[COL]]] : memref<?x?xbf16>
// DOT-NEXT:     memref.load %b[%{{.*}}, %[[COL]]] : memref<?x?xbf16>
// DOT:          vector.store %{{.*}}, %b_panel[%{{.*}}, %{{.*}}] : memref<256x128xbf16>, vector<2xbf16>
// DOT:          scf.for %{{.*}} iter_args(
// DOT-COUNT-6:    x86vector.avx512.dot
// DOT-NEXT:       scf.yield
// DOT:          vector.maskedstore %c
// DOT-NOT:      vector.fma
// DOT:          func.return
// CHECK-LABEL: func.func @gemm_bf16_dot
// CHECK-NOT:     x86vector.avx512.dot
// CHECK:         vector.fma
// CHECK:         func.return

// B read [j, k] in a loop that leaves it unchanged: the panels, packed before the loop, hold
// (K + 1) / 2 rows of pairs; a column's pair is one i32 of its row, so 16 x 16 blocks of i32
// are transposed in registers (64 shuffles each), the last pairs a column of the panel at a
// time (a loop over its 64 columns, each reading its row of B: two loads a step); none
// where the loop runs once (%repeats false: the micro-kernel packs its own, as outside a loop).
// DOT-LABEL:  func.func @gemm_bf16_dot_b_transposed_in_a_loop
// DOT:          %[[K:.*]] = memref.dim %b, %{{.*}} : memref<?x?xbf16>
// DOT:          %repeats = arith.cmpi slt, %{{.*}}, %n : index
// DOT-NEXT:     %[[ALL:.*]] = arith.divui
// DOT-NEXT:     %[[NP:.*]] = arith.select %repeats, %[[ALL]], %{{.*}} : index
// DOT:          %[[K1:.*]] = arith.addi %[[K]], %{{.*}} : index
// DOT-NEXT:     %[[ROWS:.*]] = arith.divui %[[K1]], %{{.*}} : index
// DOT-NEXT:     %b_panels = memref.alloc(%[[NP]], %[[ROWS]]) {alignment = 64 : i64} : memref<?x?x128xbf16>
// DOT:          %[[L0:.*]] = vector.load %b[%{{.*}}, %[[K0:.*]]] : memref<?x?xbf16>, vector<32xbf16>
// DOT-NEXT:     vector.bitcast %[[L0]] : vector<32xbf16> to vector<16xi32>
// DOT-COUNT-64: vector.shuffle %{{.*}}, %{{.*}} [{{.*}}] : vector<16xi32>, vector<16xi32>
// DOT-NEXT:     %[[T:.*]] = vector.bitcast %{{.*}} : vector<16xi32> to vector<32xbf16>
// DOT-NEXT:     vector.store %[[T]], %b_panels[%{{.*}}, %{{.*}}, %{{.*}}] : memref<?x?x128xbf16>, vector<32xbf16>
// DOT:          scf.for %[[COL:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// DOT-NEXT:       %[[COLUMN:.*]] = arith.addi %{{.*}}, %[[COL]] : index
// DOT-NEXT:       %[[AT:.*]] = arith.addi %[[COL]], %[[COL]] : index
// DOT-NEXT:       scf.for
// DOT:              memref.load %b[%[[COLUMN]], %{{.*}}] : memref<?x?xbf16>
// DOT-NEXT:         memref.load %b[%[[COLUMN]], %{{.*}}] : memref<?x?xbf16>
// DOT:              vector.broadcast %{{.*}} : i32 to vector<1xi32>
// DOT-NEXT:         vector.bitcast %{{.*}} : vector<1xi32> to vector<2xbf16>
// DOT-NEXT:         vector.store %{{.*}}, %b_panels[%{{.*}}, %{{.*}}, %[[AT]]] : memref<?x?x128xbf16>, vector<2xbf16>
// DOT-NEXT:       }
// DOT-NEXT:     }
// The column blocks once for both cases (columns_either): each reads a view of pairs, its
// hoisted panel (row k_lo / 2 + q) where %repeats, else the chunk's own, packed right there.
// DOT:          scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// DOT:            %[[HALF:.*]] = arith.divui %{{.*}}, %{{.*}} : index
// DOT-NEXT:       %delta = arith.select %repeats, %[[HALF]], %{{.*}} : index
// DOT-NEXT:       scf.for %{{.*}} = %{{.*}} to %{{.*}} step %{{.*}} {
// DOT-NEXT:         %b_view = scf.if %repeats -> (memref<?x128xbf16, strided<[128, 1], offset: ?>>) {
// DOT:                memref.subview %b_panels[
// DOT:              } else {
// DOT:                vector.store %{{.*}}, %b_panel[
// DOT:              scf.for %[[Q:.*]] = %{{.*}} to %{{.*}} step %{{.*}} iter_args(
// DOT:                %[[AT:.*]] = arith.addi %[[Q]], %delta : index
// DOT-NEXT:           vector.load %b_view[%[[AT]], %{{.*}}] : memref<?x128xbf16, strided<[128, 1], offset: ?>>, vector<32xbf16>
// DOT:                x86vector.avx512.dot
// DOT-NOT:        scf.if %repeats
// DOT:          memref.dealloc %b_panels

// With AMX tiles as well (Inputs/amx.toml), the same column blocks once for both cases, in
// passes: where %repeats, one pass over every block (its loop ends 1 past the first), the whole
// 32-row blocks of tiles first, each over all the hoisted panels, then the panels' other rows;
// else a pass per block, its own panel packed first (%own). The tiles read the block's view
// too, pair (k - %k_first) / 2 of it (%k_first: 0 for a hoisted panel, which holds every pair,
// the chunk's first step for its own).
// RUN: npugrad-opt %s -p 'vectorize-contractions{target="%inputs/amx.toml"}' | FileCheck %s --check-prefix=AMX
// AMX-LABEL:  func.func @gemm_bf16_dot_b_transposed_in_a_loop
// AMX:          %b_panels = memref.alloc
// AMX:          scf.for %t = %c0 to %n step %c1 {
// AMX:            scf.for %[[K0:.*]] = %{{.*}} to %{{.*}} step %{{.*}} {
// AMX:              %delta = arith.select %repeats, %{{.*}}, %{{.*}} : index
// AMX-NEXT:         %k_first = arith.select %repeats, %{{.*}}, %[[K0]] : index
// AMX:              %[[ONCE:.*]] = arith.minui %[[BLOCKS_END:.*]], %{{.*}} : index
// AMX-NEXT:         %passes_end = arith.select %repeats, %[[ONCE]], %[[BLOCKS_END]] : index
// AMX-NEXT:         %own = arith.xori %repeats, %{{.*}} : i1
// AMX-NEXT:         scf.for %[[PASS:.*]] = %{{.*}} to %passes_end step %{{.*}} {
// AMX-NEXT:           %pass_start = arith.select %repeats, %{{.*}}, %[[PASS]] : index
// AMX-NEXT:           %[[NEXT:.*]] = arith.addi %[[PASS]], %{{.*}} : index
// AMX-NEXT:           %pass_end = arith.select %repeats, %[[BLOCKS_END]], %[[NEXT]] : index
// AMX-NEXT:           scf.if %own {
// AMX:                  vector.store %{{.*}}, %b_panel[
// AMX:                  scf.for %{{.*}} = %pass_start to %pass_end step %{{.*}} {
// AMX-NEXT:               %b_view = scf.if %repeats -> (memref<?x128xbf16, strided<[128, 1], offset: ?>>) {
// AMX:                      memref.subview %b_panels[
// AMX:                    } else {
// AMX-NEXT:                 "memref.cast"(%b_panel)
// AMX:                    %tile_steps = arith.divui
// AMX:                    scf.for %[[G:.*]] = %{{.*}} to %tile_steps step %{{.*}} iter_args(
// AMX:                      %[[K:.*]] = arith.addi %[[K0]], %{{.*}} : index
// AMX-NEXT:                 %[[KR:.*]] = arith.subi %[[K]], %k_first : index
// AMX-NEXT:                 %[[Q:.*]] = arith.divui %[[KR]], %{{.*}} : index
// AMX-NEXT:                 "amx.tile_load"(%a, %{{.*}}, %[[K]])
// AMX-NEXT:                 "amx.tile_load"(%b_view, %[[Q]], %{{.*}})
// AMX:                  x86vector.avx512.dot
// AMX:                scf.for %{{.*}} = %pass_start to %pass_end step %{{.*}} {
// AMX-NEXT:             %b_view_{{[0-9]+}} = scf.if %repeats
// AMX-NOT:              amx.tile_mulf
// AMX:                  x86vector.avx512.dot
// AMX-NOT:          scf.if %repeats
// AMX:          memref.dealloc %b_panels

func.func @gemm(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
  func.return
}

func.func @gemm_bf16_transposed_lhs(%a: memref<64x50xbf16>, %b: memref<64x100xbf16>, %c: memref<50x100xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d1, d0)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : memref<64x50xbf16>, memref<64x100xbf16>) outs(%c : memref<50x100xf32>) {
  ^bb0(%x: bf16, %y: bf16, %z: f32):
    %xf = arith.extf %x : bf16 to f32
    %yf = arith.extf %y : bf16 to f32
    %p = arith.mulf %xf, %yf : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
  func.return
}

func.func @gemm_f16(%a: memref<50x64xf16>, %b: memref<64x100xf16>, %c: memref<50x100xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : memref<50x64xf16>, memref<64x100xf16>) outs(%c : memref<50x100xf32>) {
  ^bb0(%x: f16, %y: f16, %z: f32):
    %xf = arith.extf %x : f16 to f32
    %yf = arith.extf %y : f16 to f32
    %p = arith.mulf %xf, %yf : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
  func.return
}

func.func @gemm_narrow_b(%a: memref<50x64xf32>, %b: memref<64x128xf32>, %c: memref<50x128xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : memref<50x64xf32>, memref<64x128xf32>) outs(%c : memref<50x128xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
  func.return
}

func.func @not_a_contraction(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.maximumf %z, %p : f32
    linalg.yield %s : f32
  }
  func.return
}

func.func @gemm_in_a_loop_b_invariant(%a: memref<?x?xf32>, %b: memref<?x?xbf16>, %c: memref<?x?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %t = %c0 to %n step %c1 {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : memref<?x?xf32>, memref<?x?xbf16>) outs(%c : memref<?x?xf32>) {
  ^bb0(%x: f32, %y: bf16, %z: f32):
    %yf = arith.extf %y : bf16 to f32
    %p = arith.mulf %x, %yf : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
  }
  func.return
}

func.func @gemm_in_a_loop_b_written(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f32
  scf.for %t = %c0 to %n step %c1 {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
    memref.store %one, %b[%c0, %c0] : memref<?x?xf32>
  }
  func.return
}

func.func @gemm_in_a_loop_b_written_elsewhere(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %one = arith.constant 1.0 : f32
  memref.store %one, %b[%c0, %c0] : memref<?x?xf32>
  scf.for %t = %c0 to %n step %c1 {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
  }
  func.return
}

func.func @gemm_in_a_loop_b_a_view_of_the_loop(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %k = memref.dim %a, %c1 : memref<?x?xf32>
  %m = memref.dim %c, %c1 : memref<?x?xf32>
  scf.for %t = %c0 to %n step %c1 {
    %bt = memref.subview %b[%t, 0] [%k, %m] [1, 1] : memref<?x?xf32> to memref<?x?xf32, strided<[?, 1], offset: ?>>
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %bt : memref<?x?xf32>, memref<?x?xf32, strided<[?, 1], offset: ?>>) outs(%c : memref<?x?xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
  }
  func.return
}

func.func @gemm_in_a_loop_b_fresh(%a: memref<50x64xf32>, %c: memref<50x128xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %buf = memref.alloc() : memref<64x128xf32>
  %c0f = arith.constant 0.0 : f32
  linalg.fill ins(%c0f : f32) outs(%buf : memref<64x128xf32>)
  scf.for %t = %c0 to %n step %c1 {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %buf : memref<50x64xf32>, memref<64x128xf32>) outs(%c : memref<50x128xf32>) {
  ^bb0(%x: f32, %y: f32, %z: f32):
    %p = arith.mulf %x, %y : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
  }
  memref.dealloc %buf : memref<64x128xf32>
  func.return
}

func.func @gemm_in_a_loop_b_transposed(%a: memref<?x?xf32>, %b: memref<?x?xf32>, %c: memref<?x?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %t = %c0 to %n step %c1 {
    linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d2, d1)>,
                                     affine_map<(d0, d1, d2) -> (d0, d2)>],
                    iterator_types = ["parallel", "reduction", "parallel"]}
        ins(%a, %b : memref<?x?xf32>, memref<?x?xf32>) outs(%c : memref<?x?xf32>) {
    ^bb0(%x: f32, %y: f32, %z: f32):
      %p = arith.mulf %x, %y : f32
      %s = arith.addf %z, %p : f32
      linalg.yield %s : f32
    }
  }
  func.return
}

func.func @gemm_rows_of_an_invariant_base(%a: memref<?x?xf32>, %x: memref<?x?xf32>, %c: memref<?x?xf32>, %n: index,
                                          %tile: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %m = memref.dim %a, %c0 : memref<?x?xf32>
  %rows = memref.dim %x, %c0 : memref<?x?xf32>
  %h = memref.dim %x, %c1 : memref<?x?xf32>
  scf.for %v = %c0 to %n step %c1 {
    scf.for %t = %c0 to %rows step %tile {
      %left = arith.subi %rows, %t : index
      %size = arith.minsi %tile, %left : index
      %at = memref.subview %a[0, %t] [%m, %size] [1, 1] : memref<?x?xf32> to memref<?x?xf32, strided<[?, 1], offset: ?>>
      %xt = memref.subview %x[%t, 0] [%size, %h] [1, 1] : memref<?x?xf32> to memref<?x?xf32, strided<[?, 1], offset: ?>>
      linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                       affine_map<(d0, d1, d2) -> (d0, d2)>],
                      iterator_types = ["parallel", "reduction", "parallel"]}
          ins(%at, %xt : memref<?x?xf32, strided<[?, 1], offset: ?>>, memref<?x?xf32, strided<[?, 1], offset: ?>>)
          outs(%c : memref<?x?xf32>) {
      ^bb0(%p: f32, %q: f32, %s: f32):
        %pq = arith.mulf %p, %q : f32
        %sum = arith.addf %s, %pq : f32
        linalg.yield %sum : f32
      }
    }
  }
  func.return
}

func.func @gemm_bf16_dot(%a: memref<?x?xbf16>, %b: memref<?x?xbf16>, %c: memref<?x?xf32>) {
  linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d1, d2)>,
                                   affine_map<(d0, d1, d2) -> (d0, d2)>],
                  iterator_types = ["parallel", "reduction", "parallel"]}
      ins(%a, %b : memref<?x?xbf16>, memref<?x?xbf16>) outs(%c : memref<?x?xf32>) {
  ^bb0(%x: bf16, %y: bf16, %z: f32):
    %xf = arith.extf %x : bf16 to f32
    %yf = arith.extf %y : bf16 to f32
    %p = arith.mulf %xf, %yf : f32
    %s = arith.addf %z, %p : f32
    linalg.yield %s : f32
  }
  func.return
}

func.func @gemm_bf16_dot_b_transposed_in_a_loop(%a: memref<?x?xbf16>, %b: memref<?x?xbf16>, %c: memref<?x?xf32>, %n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  scf.for %t = %c0 to %n step %c1 {
    linalg.generic {indexing_maps = [affine_map<(d0, d1, d2) -> (d0, d1)>, affine_map<(d0, d1, d2) -> (d2, d1)>,
                                     affine_map<(d0, d1, d2) -> (d0, d2)>],
                    iterator_types = ["parallel", "reduction", "parallel"]}
        ins(%a, %b : memref<?x?xbf16>, memref<?x?xbf16>) outs(%c : memref<?x?xf32>) {
    ^bb0(%x: bf16, %y: bf16, %z: f32):
      %xf = arith.extf %x : bf16 to f32
      %yf = arith.extf %y : bf16 to f32
      %p = arith.mulf %xf, %yf : f32
      %s = arith.addf %z, %p : f32
      linalg.yield %s : f32
    }
  }
  func.return
}
