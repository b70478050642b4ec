"""examples/train_lm_head.py, short: a model trained with npugrad's kernels (embedding backward,
linear cross-entropy gradient, EMA-Adam) follows the loss curve of the same model trained with
PyTorch's, step for step."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="PyTorch is an optional extra (pip install npugrad[torch])")

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "train_lm_head.py"


def _example():
    spec = importlib.util.spec_from_file_location("train_lm_head", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_loss_curves_of_npugrad_and_pytorch_match(tmp_path, capsys):
    example = _example()
    plot = tmp_path / "curves.png"
    assert example.main(["--steps", "40", "--tokens", "256", "--csv", str(tmp_path / "curves.csv"),
                         "--plot", str(plot)]) == 0
    printed = capsys.readouterr().out
    assert "max |npugrad - PyTorch| over 40 steps" in printed
    has_matplotlib = importlib.util.find_spec("matplotlib") is not None
    assert plot.exists() == has_matplotlib
    assert ("plot: matplotlib is not installed" in printed) != has_matplotlib
    rows = [line.split(",") for line in (tmp_path / "curves.csv").read_text().splitlines()[1:]]
    ours, theirs = [float(r[1]) for r in rows], [float(r[2]) for r in rows]
    assert len(ours) == 40
    assert max(abs(a - b) for a, b in zip(ours, theirs)) < 5e-3
    assert ours[-1] < ours[0] - 1.0  # it learns


@pytest.mark.parametrize("flags", [["--steps", "0"], ["--steps", "-1"], ["--tokens", "0"], ["--dim", "-3"],
                                   ["--lr", "nan"], ["--tolerance", "nan"], ["--csv", "/nonexistent/curves.csv"],
                                   ["--plot", "/nonexistent/curves.png"]])
def test_a_bad_option_is_a_usage_error_before_the_training(flags, capsys):
    """Not a traceback minutes later (an empty list of losses, a negative dimension, a CSV that
    cannot be written after the run), nor nan losses from empty batches: exit 2, the flag named."""
    with pytest.raises(SystemExit) as e:
        _example().main(flags)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flags[0]}:" in err
    assert "Traceback" not in err
