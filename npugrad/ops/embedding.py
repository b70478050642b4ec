"""embedding_dense_backward (work in progress)."""


def embedding_dense_backward(*args, **kwargs):
    raise NotImplementedError("embedding_dense_backward is not lowered yet")
