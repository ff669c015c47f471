"""Comparisons that hold (issue 61): between two runs the same kernel on another grid, or a copy
of other bytes, is other work, not the GPU's pace; several runs a side are labelled; a change
per layer inside the noise is drawn as one. Checked on H200 captures whose truth the
workloads recorded (tests/data/shapes: the batch, the input size and the bytes each copy
moves; CUDA events per iteration), never on nsightlab's own answers."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

import nsightlab
from conftest import xz_fixtures
from nsightlab.analysis import work
from nsightlab.comparison.diff import runs_note

SHAPES = Path(__file__).parent / "data" / "shapes"
PACE = Path(__file__).parent / "data" / "pace"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, SHAPES, prefix="h200-")


@pytest.fixture(scope="module")
def pace_run(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, PACE, prefix="h200-")


def truth(name: str) -> dict:
    return json.loads((SHAPES / "truth" / f"h200-{name}.truth.json").read_text())


def test_a_larger_batch_is_other_work_not_the_gpus_pace(run, cache_dir):
    """ViT-S at batch 32 and 48: the norms and elementwise kernels keep their names on 1.5x
    the blocks: a change of work (with its GPU time), never 'identical kernels ... the GPU's
    pace'."""
    assert (truth("vits32_a")["batch"], truth("vits48")["batch"]) == (32, 48)
    h = nsightlab.diff(run("vits32_a"), run("vits48")).headline
    assert not h["same_work"]
    grids = [c for c in h["reshaped"] if c["kind"] == "kernel" and c["what"] == "grid"]
    assert grids and all(c["ratio"] == pytest.approx(1.5, rel=0.02) for c in grids)
    assert "run on larger grids (1.50x the blocks)" in h["work_change"]
    assert "the kernels it touched take" in h["verdict"]
    assert "GPU's pace" not in h["verdict"]


def test_a_larger_input_moves_its_copies_bytes_and_grids(run, cache_dir):
    """ResNet-18 at 224 and 448 with pageable copies in and out: the input copy moves 4x the
    bytes (the workload's own count), the convs run on other grids."""
    a, b = truth("conv224"), truth("conv448")
    h = nsightlab.diff(run("conv224"), run("conv448")).headline
    assert not h["same_work"]
    (copy,) = [c for c in h["reshaped"] if c["token"] == "copy h2d_pageable"]
    assert (copy["a"], copy["b"]) == (a["h2d_bytes"], b["h2d_bytes"])
    assert (f"host-to-device copies from pageable memory {a['h2d_bytes'] / 1e6:.1f} MB -> "
            f"{b['h2d_bytes'] / 1e6:.1f} MB each") in h["work_change"]
    assert "kernels" in h["work_change"] and "run on other grids" in h["work_change"]
    assert "GPU's pace" not in h["verdict"]


def test_copies_removed_are_named_with_their_bytes(run, cache_dir):
    """The io_binding-like pair: the same model with its input already on the GPU and its
    output left there: the pageable copies of every pass are gone, with their bytes."""
    a = truth("conv224")
    h = nsightlab.diff(run("conv224"), run("bound224")).headline
    assert (f"-1 host-to-device copy from pageable memory ({a['h2d_bytes'] / 1e6:.1f} MB each)"
            in h["work_change"])
    assert (f"-1 device-to-host copy into pageable memory ({a['d2h_bytes'] / 1e3:.1f} kB each)"
            in h["work_change"])
    assert not [c for c in h["reshaped"] if c["kind"] == "kernel"]  # the same kernels


def test_a_ddp_rank_at_twice_the_batch_is_other_work(run, cache_dir):
    """2-GPU DDP ResNet-18 at batch 64 and 128 on both ranks: rank 1 against rank 1, its
    convs and norms on up to twice the blocks; NCCL's kernels (waiting, not math) are never
    read as the GPU's pace."""
    assert {truth(f"ddp{b}.rank1")["batch"] for b in (64, 128)} == {64, 128}
    h = nsightlab.diff(run("ddp64"), run("ddp128")).headline
    assert not h["same_work"]
    ratios = [c["ratio"] for c in h["reshaped"] if c["kind"] == "kernel"]
    assert max(ratios) == pytest.approx(2.0, rel=0.02)
    assert "GPU's pace" not in h["verdict"]
    assert not any("are they the same model" in w for w in h["workload_warnings"])


def test_the_same_capture_twice_is_still_the_same_work(run, pace_run, cache_dir):
    """A/A: the shapes of the same work agree, so it reads 'the same work' as before."""
    for a, b in ((run("vits32_a"), run("vits32_a")),
                 (pace_run("aa_vits25_a"), pace_run("aa_vits25_b"))):
        h = nsightlab.diff(a, b).headline
        assert h["same_work"] and h["reshaped"] == []
        assert h["verdict"].startswith("The same work in A and B")


def test_reshaped_compares_per_launch_and_per_copy():
    a = {"k": {"n": 2.0, "blocks": 256.0, "threads": 65536.0, "smem": 0.0, "grid": "256 x 1 x 1",
               "block": "256 x 1 x 1"},
         "same": {"n": 1.0, "blocks": 8.0, "threads": 1024.0, "smem": 0.0, "grid": "8 x 1 x 1",
                  "block": "128 x 1 x 1"},
         "copy h2d_pageable": {"n": 1.0, "bytes": 73e6}}
    b = {**a, "k": {**a["k"], "blocks": 1024.0, "threads": 262144.0, "grid": "1024 x 1 x 1"},
         "copy h2d_pageable": {"n": 1.0, "bytes": 18e6}}
    got = {c["token"]: c for c in work.reshaped(a, b)}
    assert set(got) == {"k", "copy h2d_pageable"}
    assert got["k"]["ratio"] == 4.0 and got["k"]["what"] == "grid"
    words = work.reshape_words(list(got.values()))
    assert "k runs on a 4.00x larger grid (256 x 1 x 1 blocks of 256 x 1 x 1 -> 1024 x 1 x 1" \
        in words
    assert "host-to-device copies from pageable memory 73.0 MB -> 18.0 MB each" in words
    assert work.reshaped(a, a) == []


def test_several_runs_a_side_say_which_run_the_tables_are_of(pace_run, cache_dir):
    a = [pace_run("aa_vits25_a"), pace_run("host_vits100_a")]
    b = [pace_run("aa_vits25_b"), pace_run("host_vits100_b")]
    h = nsightlab.diff(a, b).headline
    assert h["a_runs"] == ["h200-aa_vits25_a", "h200-host_vits100_a"]
    note = runs_note(h)
    assert note.startswith("several runs: A 2 runs (h200-aa_vits25_a, h200-host_vits100_a), B 2")
    assert "of the first run of each side alone (A h200-aa_vits25_a, B h200-aa_vits25_b)" in note
    # the headline's point estimate is the runs' (as its interval), not the first pair's
    assert h["interval"]["ratio"] == pytest.approx(1 / h["speedup"], rel=1e-6)
    assert h["a_median_ns"] / h["b_median_ns"] != pytest.approx(h["speedup"], rel=0.01)
    assert runs_note(nsightlab.diff(a[0], b[0]).headline) == ""


def test_a_layer_change_inside_its_noise_is_marked(sqlite_of, cache_dir):
    """The same report against itself: every layer's change (0) is inside its noise band;
    fp16 against fp8: the blocks' changes (~0.57 ms) are far outside theirs."""
    same = nsightlab.diff(sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp16")).by_layer
    assert same["within_noise"].all()
    d = nsightlab.diff(sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp8")).by_layer
    blocks = d[d["layer"].str.fullmatch(r"block\d+")]
    assert len(blocks) == 12 and not blocks["within_noise"].any()
    assert (blocks["noise_ns"] > 0).all() and (blocks["noise_ns"] < 0.1 * blocks["delta_ns"].abs()).all()


def test_the_layer_chart_draws_no_bar_for_a_change_inside_the_noise(sqlite_of, cache_dir):
    """The HTML's 'Change per layer': a change inside its band has no bar (its band alone, in
    grey), and the axis holds 2% of the largest layer either way (a 0.003 ms change of a
    1.5 ms layer is not drawn full-width)."""
    from nsightlab.renderers.charts import layer_chart

    d = nsightlab.diff(sqlite_of("h200-vit-fp16"), sqlite_of("h200-vit-fp16"))
    spec = layer_chart(d).to_dict()
    rows = next(iter(spec["datasets"].values()))
    assert rows and all(r["delta_ms"] == 0 and r["reading"] == "inside the noise" for r in rows)
    lo, hi = spec["layer"][0]["encoding"]["x"]["scale"]["domain"]
    biggest = max(max(r["a_ns"], r["b_ns"]) for r in rows) / 1e6
    assert hi == -lo >= 0.02 * biggest
