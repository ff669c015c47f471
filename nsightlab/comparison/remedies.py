"""Advice in the terms of the run's own runtime (issue 47, begun).

The budget's advice names remedies generically (``budget.GRAPH_HOW``, ``PIN_HOW``,
``ASYNC_HOW``, ``SYNC_HOW``: the PyTorch, CUDA and trtexec spellings side by side). Once the
runtime behind the run is known (``analysis.runtime``), each is said as that runtime's users
do it; an unknown runtime gets the CUDA calls themselves. Only the wording changes: when to
advise stays the budget's rule on the measured shares.
"""
from __future__ import annotations

from nsightlab.analysis import budget

ORT = ("(the CUDA EP's enable_cuda_graph provider option, with inputs and outputs bound by "
       "io_binding; ONNX Runtime refuses it while any node runs on the CPU EP: see nsightlab "
       "ort for the placement)")
#: runtime (as ``analysis.runtime`` names it, EP apart) -> generic phrase -> its own phrase
TERMS = {
    "PyTorch": {budget.GRAPH_HOW: "(torch.cuda.graphs, or torch.compile mode='reduce-overhead')",
                budget.PIN_HOW: "(pin_memory=True on the DataLoader or tensor)",
                budget.ASYNC_HOW: "(pinned memory, .to(device, non_blocking=True))",
                budget.SYNC_HOW: "(.item(), .cpu(), .tolist(), torch.cuda.synchronize())"},
    "PyTorch (torch.compile)": {budget.GRAPH_HOW: "(torch.compile mode='reduce-overhead')"},
    "TensorRT": {budget.GRAPH_HOW: "(trtexec --useCudaGraph; in an application, enqueueV3 "
                                   "captured once into a CUDA graph and replayed)",
                 budget.PIN_HOW: "(cudaHostAlloc for the bindings' host buffers; trtexec "
                                 "--noDataTransfers to time the engine alone)",
                 budget.ASYNC_HOW: "(cudaMemcpyAsync from pinned buffers on the enqueue's stream)",
                 budget.SYNC_HOW: "(a cudaStreamSynchronize after every enqueue; trtexec "
                                  "--useSpinWait makes its waits tighter)"},
    "ONNX Runtime": {budget.GRAPH_HOW: ORT,
                     budget.PIN_HOW: "(io_binding with device or pinned buffers)",
                     budget.ASYNC_HOW: "(io_binding: inputs bound on the device)",
                     budget.SYNC_HOW: "(session.run copies every output back and waits: "
                                      "io_binding keeps them on the device)"},
    "unknown": {budget.GRAPH_HOW: "(cudaStreamBeginCapture ... cudaGraphLaunch)",
                budget.PIN_HOW: "(cudaHostAlloc / cudaHostRegister)",
                budget.ASYNC_HOW: "(cudaMemcpyAsync from pinned memory)",
                budget.SYNC_HOW: "(cudaDeviceSynchronize, cudaStreamSynchronize, a blocking "
                                 "cudaMemcpy)"},
}


def in_terms(advice: str, runtime: str) -> str:
    """``advice`` with each generic remedy said in ``runtime``'s terms (one runtime: several,
    as "PyTorch / TensorRT", keep the generic words)."""
    terms = TERMS.get(runtime.split(" (")[0] if runtime.startswith("ONNX Runtime") else runtime)
    if not advice or terms is None:
        return advice
    for generic, own in terms.items():
        advice = advice.replace(generic, own)
    return advice
