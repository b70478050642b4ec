"""grad.embedding_dense_backward → loops (work in progress)."""


def lower_embedding_dense_backward(op, e) -> None:
    raise NotImplementedError("grad.embedding_dense_backward has no lowering yet")
