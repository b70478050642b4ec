"""train.embedding_dense_backward: the rows of grad summed into the rows their indices name (OPS.md §2)."""

from __future__ import annotations

import itertools

import numpy as np

from npugrad.dialect import EmbeddingDenseBackwardOp
from npugrad.lowering.train_to_loops.embedding import lower_embedding_dense_backward
from npugrad.passes.tiling import embedding
from npugrad.recipes.base import FLOAT_DTYPES, Example, OpRecipe, cast
from npugrad.reference import ops as ref


class EmbeddingDenseBackward(OpRecipe):
    op = EmbeddingDenseBackwardOp

    def lower(self, op, e):
        lower_embedding_dense_backward(op, e)

    def choose_tile_sizes(self, op, target):
        return embedding.choose_tile_sizes(op, target)

    def footprint(self, op, sizes, target):
        return embedding.footprint(op, sizes, target)

    def load(self, op, sizes, target):
        return embedding.load(op, sizes, target)

    def tile(self, op, target, e):
        embedding.tile_embedding_dense_backward(op, target, e)

    def distribute(self, op, e):
        return embedding.distribute_embedding(op, e)

    def reference(self, arrays, props):
        a = arrays
        return {"out": ref.embedding_dense_backward(a["grad"], a["indices"], props["num_weights"],
                                                    props.get("padding_idx", -1), props.get("scale_grad_by_freq", False))}

    def magnitude(self, arrays, props):
        # Each row the sum of the |grad| rows its index gathers: the scale of its rounding error.
        return self.reference({**arrays, "grad": np.abs(np.asarray(arrays["grad"], np.float32))}, props)

    def random_inputs(self, shapes, dtypes, props, rng):
        nw = int(props["num_weights"])
        idx = rng.integers(0, max(nw, 1), shapes["indices"]) if nw else np.zeros(shapes["indices"], np.int64)
        pad = int(props.get("padding_idx", -1))
        if 0 <= pad < nw:  # hit the padding row, which must stay zero
            idx = np.where(rng.random(idx.shape) < 0.2, pad, idx)
        return {"grad": cast(rng.standard_normal(shapes["grad"]), dtypes["grad"]), "indices": idx.astype(dtypes["indices"])}

    def api(self):
        from npugrad.ops import embedding_dense_backward

        return embedding_dense_backward

    def call_api(self, arrays, props):
        out = self.api()(arrays["grad"], arrays["indices"], props["num_weights"], props.get("padding_idx", -1),
                         props.get("scale_grad_by_freq", False))
        return {"out": out}

    def examples(self):
        for dtype, scale, padding in itertools.product(FLOAT_DTYPES, (False, True), (-1, 3)):
            props = {"num_weights": 50, "padding_idx": padding, "scale_grad_by_freq": scale}
            shapes = {"grad": (4, 33, 24), "indices": (4, 33)}
            yield Example(f"padding {padding}{', scale by freq' if scale else ''}", shapes,
                          {"grad": dtype, "indices": np.dtype(np.int64)}, props)
