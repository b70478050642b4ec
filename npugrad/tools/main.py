"""The `npugrad` command: `npugrad demo` compiles every op, runs it and checks it against the reference."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="npugrad", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="compile, run and check every op (every mode and dtype)")
    demo.add_argument("--seed", type=int, default=None, help="fix the random inputs (default: fresh ones)")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from npugrad.tools.demo import run_demo

        sys.exit(0 if run_demo(seed=args.seed) else 1)


if __name__ == "__main__":
    main()
