"""Arrays from other libraries: PyTorch tensors and anything with `__dlpack__` go into the API
without a copy (dlpack.py); `npugrad.torch` makes the kernels PyTorch custom ops."""
