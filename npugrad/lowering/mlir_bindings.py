"""The one place that imports the upstream MLIR Python bindings.

A real `mlir` package (the upstream `mlir-python-bindings` wheel or an LLVM build) is preferred when
installed; otherwise the copy of the same bindings shipped inside the `torch-mlir` wheel is used.
Everything else in npugrad imports `ir`, `passmanager`, `translate_module_to_llvmir` and `runtime`
from here.
"""

from __future__ import annotations

try:  # pragma: no cover - depends on what is installed
    from mlir import ir, passmanager, runtime
    from mlir.dialects.llvm import translate_module_to_llvmir

    PROVIDER = "mlir"
except ImportError:
    from torch_mlir import ir, passmanager, runtime
    from torch_mlir.dialects.llvm import translate_module_to_llvmir

    PROVIDER = "torch_mlir"

__all__ = ["PROVIDER", "ir", "passmanager", "runtime", "translate_module_to_llvmir"]
