"""GPU memory over time (table memory, recipe gpu_memory) on H200 captures made for it
(tests/data/models: CUDA graphs for 1, 4 and 16 batch sizes, and a run that keeps a tensor
every iteration), each printing PyTorch's own max_memory_reserved()."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

import nsightlab
import nsightlab.recipe_runner as R
from conftest import xz_fixtures
from nsightlab.cli import cli

MODELS = Path(__file__).parent / "data" / "models"
MIB = 1 << 20


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return xz_fixtures(tmp_path_factory, MODELS)


def torch_memory(name: str) -> dict[str, int]:
    text = (MODELS / "expected" / name / "torch_memory.txt").read_text()
    return {k: int(v) for k, v in (line.split("=") for line in text.split())}


@pytest.mark.parametrize("n", [1, 4, 16])
def test_peak_matches_pytorch_and_grows_with_each_graph(n, model, cache_dir):
    """The device-memory peak is PyTorch's max_memory_reserved plus the same 64.4 MiB in every
    run (memory the CUDA libraries cudaMalloc themselves, outside PyTorch's allocator, and the
    modules' static memory); every graph capture raises memory in use."""
    name = f"h200-graphs{n}-fp16"
    out = R.run("gpu_memory", model(name))
    dev = out["summary"].set_index("memory").loc["device"]
    extra = dev["peak_bytes"] - torch_memory(name)["max_memory_reserved"]
    assert 64 * MIB <= extra <= 65 * MIB, extra / MIB
    caps = out["by_range"][out["by_range"]["phase"] == "graph capture"]
    assert list(caps["name"]) == [f"capture_bs{k}" for k in range(1, n + 1)]
    assert caps["in_use_end_bytes"].is_monotonic_increasing
    assert dev["peak_in_range"] in set(caps["name"]) | {""}
    assert dev["unmatched_frees"] == 0 and dev["end_bytes"] == dev["peak_bytes"]
    api = out["by_api"].set_index(["api", "memory"])
    assert api.loc[("cudaMalloc", "device"), "allocated_bytes"] >= torch_memory(name)["max_memory_reserved"]


def test_peaks_rise_with_the_number_of_graphs(model, cache_dir):
    peaks = [R.run("gpu_memory", model(f"h200-graphs{n}-fp16"))["summary"]
             .set_index("memory").loc["device", "peak_bytes"] for n in (1, 4, 16)]
    assert peaks[0] < peaks[1] < peaks[2] and peaks[2] > 10 * peaks[0]


def test_a_leak_shows_as_growth_in_the_iterations(model, cache_dir):
    """32 MiB kept every iteration: PyTorch's allocator takes 100 MiB blocks every third
    iteration; the growth is in the iteration ranges, the blocks are still allocated at the
    end, and `report` says so."""
    path = model("h200-leak-fp16")
    out = R.run("gpu_memory", path)
    it = out["by_range"][out["by_range"]["phase"] == "iteration"]
    grew = it[it["growth_bytes"] > 0]
    assert (grew.loc[grew["name"] != "iter0", "growth_bytes"] == 100 * MIB).all()
    assert len(grew) == 4
    still = out["still_allocated"]
    assert (still["range"].str.startswith("iter") & (still["bytes"] == 100 * MIB)).sum() >= 3
    assert still["freed_at_ns"].isna().all()
    text = CliRunner().invoke(cli, ["report", str(path)]).stdout
    assert "GPU memory (device 0): peak" in text and "grew 400 MiB over 4 iteration" in text


def test_frees_pair_with_their_allocations(model, cache_dir):
    out = R.run("gpu_memory", model("h200-graphs4-fp16"))
    s = out["summary"].set_index("memory").loc["device"]
    assert s["frees"] == 13 and s["freed_bytes"] == 400556032
    freed = out["largest"][out["largest"]["freed_at_ns"].notna()]
    assert (freed["freed_at_ns"] > freed["start_ns"]).all() and len(freed) >= 2
    t = out["timeline"]
    assert t["in_use_bytes"].iloc[-1] == s["end_bytes"] and (t["in_use_bytes"] >= 0).all()


def test_reports_without_memory_events_say_how_to_record_them(sqlite_of, cache_dir):
    r = nsightlab.open(sqlite_of("h200-vit-fp16"))
    assert r.memory().empty
    assert "--cuda-memory-usage=true" in r.missing_hint("memory")
    res = CliRunner().invoke(cli, ["recipe", "run", "gpu_memory", str(sqlite_of("h200-vit-fp16"))])
    assert res.exit_code == 0 and "--cuda-memory-usage=true" in res.output
