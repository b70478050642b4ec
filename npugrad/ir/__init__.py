"""IR building blocks shared by the passes and lowerings: an IR builder that inserts through a
rewriter, and queries on memrefs and modules. No codegen policy lives here."""

from npugrad.ir.builder import IRBuilder, index
from npugrad.ir.queries import (
    defined_functions,
    enclosing_function,
    integer_constant,
    iterator_kinds,
    operand_dims,
    static_shape,
    unit_innermost_stride,
)

__all__ = ["IRBuilder", "defined_functions", "enclosing_function", "index", "integer_constant", "iterator_kinds",
           "operand_dims", "static_shape", "unit_innermost_stride"]
