"""bench/ab.py: tilings of the FLCE gradient compared in one process, calls taking turns."""

from __future__ import annotations

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench import ab


def test_variants_take_turns_and_report_ratios_to_the_first(capsys, monkeypatch):
    monkeypatch.setenv("NPUGRAD_CACHE_DIR", "kept")  # ab.py compiles with a fresh cache of its own
    assert ab.main(["--size", "96,64,256", "--dtype", "float32", "--rounds", "3",
                    "--variant", "default", "--variant", "tile_bt=96,tile_v=64"]) == 0
    out = capsys.readouterr().out
    assert "FLCE gradient float32 BT=96 H=64 V=256: 3 round(s)" in out
    rows = [line for line in out.splitlines() if line.startswith(("default ", "tile_bt="))]
    assert len(rows) == 2
    assert re.search(r"\d+\.\d{3}x \(\d+\.\d\d-\d+\.\d\d\)$", rows[1]), rows[1]  # the median round ratio, its range
    assert not re.search(r"x \(", rows[0])  # the first is the baseline
    assert os.environ["NPUGRAD_CACHE_DIR"] == "kept"


def test_variant_parsing():
    assert ab.parse_variant("tile_bt=384, tile_v=320") == {"tile_bt": 384, "tile_v": 320}
    assert ab.parse_variant("default") == {} and ab.parse_variant("") == {}
    assert ab.parse_variant("cpu=my.toml,tile_v=320") == {"cpu": "my.toml", "tile_v": 320}
    for bad, message in (("tile_bt", "name=value"), ("tile_bt=x", "takes an integer"), ("=3", "name=value"),
                         ("cpu=", "takes a target file or name")):
        with pytest.raises(SystemExit, match=message):
            ab.parse_variant(bad)


@pytest.mark.parametrize("argv, message", [
    (["--variant", "default"], "at least two"),
    (["--variant", "default", "--variant", "no_such=1", "--size", "8,8,8"], "no_such"),
    (["--variant", "default", "--variant", "tile_bt=-1", "--size", "8,8,8"], "tile_bt"),
    (["--variant", "default", "--variant", "default", "--size", "8,8"], "BT,H,V"),
    (["--variant", "default", "--variant", "cpu=no/such.toml", "--size", "8,8,8"], "cpu=no/such.toml: unknown target"),
])
def test_bad_arguments_are_named(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        ab.main(argv)
    assert e.value.code != 0
    assert message in str(e.value.code) + capsys.readouterr().err
