"""The vocabulary: records (a finding, a piece of advice) said as sentences.

Analyses and the run's report make records: a ``code``, the numbers behind it (``values``),
what it is about (a GPU, a kernel) and, once said, its ``text``; decisions read codes, never
text. This module says them, and says a remedy in the terms of the run's runtime (PyTorch,
TensorRT, ONNX Runtime, or the CUDA calls themselves when unknown): a rendering choice, not a
rewrite of generic words. It sits in the core layer (``nsightlab._layers``) so every layer
that makes a record can say it.
"""
from __future__ import annotations

from nsightlab.core.units import fmt_ms, fmt_time

#: how each remedy is done, generically (the PyTorch, CUDA and trtexec spellings side by side),
#: then in each runtime's own terms (as ``analysis.runtime`` names it, EP apart)
HOW = {
    None: {"graph": "(torch.cuda.graphs, torch.compile mode='reduce-overhead', trtexec --useCudaGraph)",
           "pin": "(pin_memory=True / cudaHostAlloc)",
           "async": "(pinned memory, non_blocking=True)",
           "sync": "(.item(), .cpu(), torch.cuda.synchronize())"},
    "PyTorch": {"graph": "(torch.cuda.graphs, or torch.compile mode='reduce-overhead')",
                "pin": "(pin_memory=True on the DataLoader or tensor)",
                "async": "(pinned memory, .to(device, non_blocking=True))",
                "sync": "(.item(), .cpu(), .tolist(), torch.cuda.synchronize())"},
    "PyTorch (torch.compile)": {"graph": "(torch.compile mode='reduce-overhead')"},
    "TensorRT": {"graph": "(trtexec --useCudaGraph; in an application, enqueueV3 captured once "
                          "into a CUDA graph and replayed)",
                 "pin": "(cudaHostAlloc for the bindings' host buffers; trtexec "
                        "--noDataTransfers to time the engine alone)",
                 "async": "(cudaMemcpyAsync from pinned buffers on the enqueue's stream)",
                 "sync": "(a cudaStreamSynchronize after every enqueue; trtexec --useSpinWait "
                         "makes its waits tighter)"},
    "ONNX Runtime": {"graph": "(the CUDA EP's enable_cuda_graph provider option, with inputs and "
                              "outputs bound by io_binding; ONNX Runtime refuses it while any "
                              "node runs on the CPU EP: see nsightlab ort for the placement)",
                     "pin": "(io_binding with device or pinned buffers)",
                     "async": "(io_binding: inputs bound on the device)",
                     "sync": "(session.run copies every output back and waits: io_binding "
                             "keeps them on the device)"},
    "unknown": {"graph": "(cudaStreamBeginCapture ... cudaGraphLaunch)",
                "pin": "(cudaHostAlloc / cudaHostRegister)",
                "async": "(cudaMemcpyAsync from pinned memory)",
                "sync": "(cudaDeviceSynchronize, cudaStreamSynchronize, a blocking cudaMemcpy)"},
}
#: the communication advice's pointer to every rank's trace; a report of the whole job says
#: its own straggler line instead (``how(job=True)``)
EVERY_RANK = (", so read every rank together (nsightlab report of the whole job, or of each "
              "rank's report at once) for the one the others wait for; then ")
STRAGGLER_ABOVE = " (the straggler line above says which rank the others wait for); then "


def how(runtime: str | None = None, graph: str | None = None, job: bool = False) -> dict:
    """The words of each remedy for ``runtime`` (several, as "PyTorch / TensorRT", or None:
    generic); ``graph``: the CUDA-graph remedy as far as the run's placement is known (ORT);
    ``job``: a report of the whole job, whose straggler line says which rank to read."""
    own = HOW.get(runtime.split(" (")[0] if runtime and runtime.startswith("ONNX Runtime")
                  else runtime) if runtime else None
    out = {**HOW[None], **(own or {}), "every_rank": STRAGGLER_ABOVE if job else EVERY_RANK}
    if graph and own is not None:
        out["graph"] = graph
    return out


def record(code: str, gpu: int | None = None, about: str | None = None, **values) -> dict:
    """A record: its code, the GPU and the thing it is about, the numbers behind it."""
    return {"code": code, "gpu": gpu, "about": about,
            "values": {k: _plain(v) for k, v in values.items()}}


def _plain(v):
    return v.item() if hasattr(v, "item") else v


def _in_ms(values: dict) -> dict:
    """Each ``X_ns`` value as ``X_ms`` ("12.34 ms") and ``X_t`` (a kernel's time: "36.8 µs")."""
    out = {f"{k[:-3]}_ms": fmt_ms(x) for k, x in values.items() if k.endswith("_ns")}
    out.update({f"{k[:-3]}_t": fmt_time(x) for k, x in values.items() if k.endswith("_ns")})
    return out


#: each piece of advice (``budget._advice``'s codes); ``{pin}`` etc.: how the remedy is done
#: (``how``), ``{X_ms}``: the value ``X_ns`` in ms
ADVICE = {
    "pin_pageable": "{pageable_pct:.0f}% of the copy time moves pageable host memory: pin it "
                    "{pin} so copies run at full bandwidth and can be asynchronous.",
    "copies_pinned": "copies already use pinned memory: move less data per iteration (keep "
                     "tensors on the GPU, send FP16/INT8 inputs) or overlap the next batch's copy "
                     "with this batch's compute.",
    "copies_serial": "copies do not overlap kernels: issue them asynchronously on another stream "
                     "{async} so they hide under compute.",
    "sync_in_loop": "{about} ({per_iteration:.0f} per iteration) leaves the GPU idle "
                    "{idle_per_iteration_ms} per iteration: {fix}.",
    "sync_rare": "the GPU idled after {about} {times} time(s) in the {iterations} iterations "
                 "({idle_ms} in all, {idle_per_iteration_ms} per iteration on "
                 "average): there the host waited after the call returned (another process, a "
                 "barrier, input, I/O): see what it did then (nsys --trace=osrt shows its waits); "
                 "the call itself is not in every iteration.",
    "launch_with_graphs": "the run already replays CUDA graphs, and the GPU still waits for "
                          "launches: graph-node tracing (--cuda-graph-trace=node) slows graph "
                          "launches, so time them with --cuda-graph-trace=graph before acting; "
                          "otherwise fuse kernels or grow the batch.",
    "launch": "the GPU waits for kernel launches: capture the loop as a CUDA graph {graph} or "
              "fuse small kernels.",
    "communication": "NCCL collectives run {communication_ms} per iteration with no "
                     "compute beside them: a rank that starts a collective early spins until the "
                     "last arrives{every_rank}overlap communication with compute (DDP: "
                     "bucket_cap_mb; no_sync for gradient accumulation).",
    "host": "the host spends {idle_host_ms} per iteration on work that launches nothing "
            "while the GPU idles: move it out of the loop, overlap it with GPU work (another "
            "thread, prefetching), or profile the CPU side (nsys --sample=cpu).",
}
#: how a sync that leaves the GPU idle in every iteration is fixed: a copy, or another call
SYNC_FIX = ("make the copy asynchronous (cudaMemcpyAsync from pinned memory) and wait once, "
            "where the result is needed",
            "remove it from the loop {sync} or move it after the work that does not need its "
            "result")


def advice(a: dict, words: dict | None = None) -> str:
    """One piece of the budget's advice (``budget._advice``'s records) in ``words``
    (``how()``; generic when None)."""
    w, v = words or how(), a["values"]
    fix = SYNC_FIX[0] if v.get("copy") else SYNC_FIX[1].format(**w)
    return ADVICE[a["code"]].format(about=a["about"], fix=fix, **w, **v, **_in_ms(v))


def said(records: list[dict], words: dict | None = None) -> str:
    """Every piece of advice in ``records``, one after another."""
    return " ".join(advice(a, words) for a in records)


def cycle(n: int) -> str:
    """A main kind whose work repeats in a cycle of ``n`` iterations."""
    return f"the work repeats in a cycle of {n} iterations (one unit of the loop is {n} iterations)"


def trend(k) -> str:
    """A loop's trend, from a kinds-table row's ``trend_*`` numbers."""
    pct, q = k["trend_change_pct"], int(k["trend_quarter"])
    return (f"{'slows down' if pct > 0 else 'speeds up'} {abs(pct):.0f}%: median "
            f"{k['trend_first_ns'] / 1e6:.3g} ms in the first {q} iterations, "
            f"{k['trend_last_ns'] / 1e6:.3g} ms in the last {q}")


#: the report's findings (``run.report.findings``): ``{about}`` what one is about, ``{X_ms}``
#: the value ``X_ns`` in words
SAY = {
    "no_verdict": "no performance verdict: the trace lacks part of the run (see the warnings)",
    "busy_outside_trace": "the GPU was busy with work outside the trace: kernels waited "
                          "{queued_ms} per iteration ({queued_pct:.0f}% of the median iteration) "
                          "to start after their launch calls had returned, with no traced GPU "
                          "work running (another process on the same GPU, or work nsys did not "
                          "trace); that idle is not launch overhead, and a CUDA graph will not "
                          "remove it: run alone on the GPU to measure",
    "main_kind": "the main kind ({which}, median {med_ms}): {verdict}",
    "loop_verdict": "the loop, every kind by its time: {verdict}: {evidence}",
    "no_loop_time": "{evidence}",
    "verdict": "{verdict}: {evidence}",
    "advice": "what to do: {words}",
    "host_syncs": "host syncs: {per_iteration:.0f} per iteration ({about}) leave the GPU idle "
                  "{idle_ms} per iteration ({idle_pct:.0f}%)",
    "no_gpu_activity": "no GPU activity in the trace: API time and NVTX ranges only",
    "top_graph": "top GPU work: {about} takes {time_pct:.0f}% of the GPU time recorded (its "
                 "kernels were not recorded one by one)",
    "top_kernel": "top kernel: {kernel_class} {precision} takes {time_pct:.0f}% of GPU time "
                  "({about})",
    "fp32_math": "FP32 math left over: {time_pct:.0f}% of GPU time in FP32 GEMM/attention/conv "
                 "kernels",
    "quantize": "quantize/cast kernels take {time_ms} per iteration ({time_pct:.0f}%): "
                "precision conversion is not free",
    "clock_low": "the SM clock averaged {sm_mhz:,.0f} MHz inside the iterations, below the "
                 "{sm_mhz_max:,.0f} MHz it reached in the run (GPU metrics): power, thermal or "
                 "application clock limits slow the GPU's kernels",
    "tensor_active_loop": "Tensor Active {tensor_active_pct:.0f}% on average inside the "
                          "iterations ({all_pct:.0f}% over all GPU activity)",
    "tensor_active_run": "Tensor Active {tensor_active_pct:.0f}% on average over the run (SMs "
                         "Active {sm_active_pct:.0f}%)",
    "tensor_estimate": "{time_pct:.0f}% of kernel time is in Tensor-Core-capable "
                       "GEMM/attention/conv kernels (estimate from names; capture with "
                       "--gpu-metrics to measure)",
    "outside_iterations": "outside the iterations (warm-up, compile, teardown): {time_ms} of "
                          "kernels, {time_pct:.0f}% of all kernel time, most in {about}; the "
                          "kernel tables count the iterations only",
    "one_rank": "NCCL collectives take {time_pct:.0f}% of kernel time, but this report holds "
                "one rank: which rank the others wait for (the straggler) needs every rank's "
                "trace (one report of the whole job, e.g. nsys profile around torchrun)",
}


#: a kernel's findings (``kernels.judge``, ``kernels.join``, ``kernels.pairs``): ``{about}``
#: the kernel, ``{X_t}`` the value ``X_ns`` as a kernel's time
SAY.update({
    "kernel_compute": "compute-bound: SM throughput {compute_pct:.0f}% of peak, limited by "
                      "{unit} ({unit_pct:.0f}%); memory {memory_pct:.0f}%",
    "kernel_memory": "memory-bound: memory throughput {memory_pct:.0f}% of peak, most at "
                     "{unit} ({unit_pct:.0f}%; DRAM {dram_pct:.0f}%); compute {compute_pct:.0f}%",
    "kernel_balanced": "compute- and memory-bound: SM throughput {compute_pct:.0f}% and memory "
                       "{memory_pct:.0f}% of peak; limited by {unit} ({unit_pct:.0f}%)",
    "kernel_latency": "latency-bound: compute {compute_pct:.0f}% and memory {memory_pct:.0f}% "
                      "of peak, both under 60%: {why}",
    "kernel_unjudged": "not judged: the report has no Speed of Light figures for it",
    "kernel_headroom": "roofline: {headroom_pct:.0f}% headroom: its work ({flops_words}"
                       "{bytes_words}) needs {t_min_t} at the ceilings ({peak_source}), it took "
                       "{duration_t}",
    "kernel_rule": "NVIDIA {rule} \"{title}\": est. {estimate_pct:.0f}%{capped_words}",
    "kernel_tensor_idle": "the trace calls {about} Tensor-Core-capable, but its tensor pipe was "
                          "{tensor_pct:.1f}% active under ncu: it runs on the CUDA cores",
    "kernel_saves": "{about}: {time_t} per iteration ({share_pct:.1f}% of the loop), "
                    "{limiter}, {headroom_pct:.0f}% headroom: up to {saves_t} per iteration "
                    "({saves_pct:.1f}% of the loop)",
    "kernel_share": "kernels run {share_pct:.0f}% of the loop's {loop_t} per iteration: the rest "
                    "is the GPU waiting (launches, syncs, host; the run's verdict says which), "
                    "and no kernel's headroom shortens that",
    "kernel_unprofiled": "not profiled: {about} ({share_pct:.1f}% of the loop's kernel time)",
    "pair_total": "{about}: the profiled kernels take {b_t} against {a_t}{repeats_words}: "
                  "{pace_words}{only_words}",
    "pair_compute": "{about}: {ratio:.2f}x ({a_t} -> {b_t}); compute-bound on both sides "
                    "({precision_a} -> {precision_b}): {expect_words}",
    "pair_memory": "{about}: {ratio:.2f}x ({a_t} -> {b_t}); memory-bound on both sides: "
                   "{bytes_words}, DRAM use {dram_a:.0f}% -> {dram_b:.0f}%; the roofline expects "
                   "{expected:.2f}x",
    "pair_mixed": "{about}: {ratio:.2f}x ({a_t} -> {b_t}); {limiter_a} -> {limiter_b}: the "
                  "roofline expects {expected:.2f}x",
    "pair_unjudged": "{about}: {ratio:.2f}x ({a_t} -> {b_t}); no roofline on one side",
    "pair_only": "only in {side}: {about}, {duration_t}, {limiter_words}",
})


def say(code: str, gpu=None, about: str | None = None, prefix: str = "", **values) -> "Said":
    """The finding ``code`` (``SAY``) about ``about`` on GPU ``gpu``, with its numbers, said
    after ``prefix`` (which GPU, when the report has several)."""
    values = {k: _plain(v) for k, v in values.items()}
    extra = _kernel_words(code, values) if code.startswith(("kernel_", "pair_")) else {}
    return Said(prefix + SAY[code].format(about=about, **values, **_in_ms(values), **extra), code,
                gpu, about, values)


def _si(x: float, unit: str) -> str:
    """An amount with its SI prefix: '1.1 TFLOP', '69.6 MB', '2,048 FLOP'."""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if x >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:,.0f} {unit}"


def _kernel_words(code: str, v: dict) -> dict:
    """The phrases of a kernel finding that depend on its numbers."""
    out = {}
    if code == "kernel_headroom":
        flops, moved = v.get("flops"), v.get("dram_bytes")
        out["flops_words"] = (f"{_si(flops, 'FLOP')} {v.get('precision') or ''}".rstrip()
                              if flops and flops > 0 else "no FLOPs")
        used = v.get("used_pct")
        out["bytes_words"] = "" if not moved or moved != moved else (
            f", {_si(moved, 'B')} of DRAM traffic" +
            (f" of which {used:.0f}% used" if used is not None and used < 99.5 else ""))
    if code == "pair_memory":
        b = v.get("bytes_ratio")
        out["bytes_words"] = ("DRAM bytes unknown" if not (b == b and b > 0) else
                              "the same DRAM bytes" if abs(b - 1) < 0.02 else
                              f"{b:.2f}x fewer DRAM bytes" if b >= 1 else
                              f"{1 / b:.2f}x more DRAM bytes")
    if code == "pair_compute":
        w = v.get("work_ratio")
        out["expect_words"] = (f"the ratio of the peaks is {v['expected']:.2f}x"
                               if w == w and w and abs(w - 1) < 0.05 else
                               f"the roofline expects {v['expected']:.2f}x (A does {w:.2f}x B's "
                               "FLOPs)")
    if code == "pair_only":
        out["limiter_words"] = (f"{v['limiter']} ({v['unit']})" if v.get("unit") and
                                v.get("limiter") in ("compute", "memory", "balanced")
                                else str(v.get("limiter")))
    if code == "pair_total":
        r = v.get("ratio")
        out["pace_words"] = ("no time on one side" if not (r == r and r > 0) else
                             "B is as fast" if abs(r - 1) < 0.02 else
                             f"B is {r:.2f}x faster" if r >= 1 else f"B is {1 / r:.2f}x slower")
        reps = [(s, v.get(f"repeats_{s}", 1)) for s in ("a", "b")]
        out["repeats_words"] = "".join(
            f" ({s.upper()} held {n} repetitions of its launches: one is counted)"
            for s, n in reps if n and n > 1)
        out["only_words"] = (f"; {v['only_b']} kernel(s) only in B take {fmt_time(v['only_b_ns'])}"
                             f" ({v['only_b_pct']:.0f}% of B)" if v.get("only_b") else "")
    if code == "kernel_rule":
        out["capped_words"] = (f", capped at the {v['capped_pct']:.0f}% headroom"
                               if v.get("capped") else "")
    return out


class Said(str):
    """A sentence that keeps its record: as a ``str``, what users read; ``code``, ``gpu``,
    ``about`` and ``values``, what code decides on; ``record()``, both as JSON data."""

    def __new__(cls, text: str = "", code: str = "", gpu=None, about=None, values=None):
        self = super().__new__(cls, text)
        self.code, self.gpu, self.about = code, _plain(gpu), about
        self.values = {k: _plain(v) for k, v in (values or {}).items()}
        return self

    def record(self) -> dict:
        return {"code": self.code, "gpu": self.gpu, "about": self.about, "values": self.values,
                "text": str(self)}

    def more(self, text: str) -> "Said":
        """The sentence with ``text`` after it, the same record."""
        return Said(str(self) + text, self.code, self.gpu, self.about, self.values)
