"""Plain LLVM IR for the JIT's own tests: a function that runs a body once per index."""

from __future__ import annotations


def counted_loop(name: str, params: str, body: str, step: str = "1", after: str = "") -> str:
    """`define void @name(params, i64 %n)`: for %i = 0, step, ... while %i < %n, run `body`
    (LLVM instructions, one per line, that may use %i); `after`: declarations that follow."""
    lines = "\n".join(f"  {line.strip()}" for line in body.strip().splitlines())
    return f"""
define void @{name}({params}, i64 %n) {{
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %body ]
  %more = icmp slt i64 %i, %n
  br i1 %more, label %body, label %done
body:
{lines}
  %next = add i64 %i, {step}
  br label %loop
done:
  ret void
}}
{after}"""
