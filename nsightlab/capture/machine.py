"""The machine's state around a capture: what sets the pace of the same work.

Recorded before and after every run of ``nsightlab capture`` into its manifest: per GPU the
SM and memory clocks, power, temperature and the compute processes on it (other than the
capture's own are work outside the trace), and the host's load. Read through NVML
(``nvidia-ml-py``) where it is installed, else ``nvidia-smi``; where neither exists nothing is
recorded and ``state`` says why (once per capture). What a manifest's states say is read by
``nsightlab.read.machine`` (diff and report read it there).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import time

from nsightlab.read.machine import summary, words  # noqa: F401  (machine.words, .summary)

#: nvidia-smi's query fields, in the order ``_from_smi`` reads them
SMI_FIELDS = ("index", "name", "clocks.sm", "clocks.mem", "power.draw", "temperature.gpu")


def state() -> dict:
    """{"time", "host_load" (1, 5, 15 min), "gpus": [{index, name, sm_mhz, mem_mhz, power_w,
    temp_c, processes: [pid...]}], "source": "nvml" | "nvidia-smi"}; without either,
    {"time", "host_load", "gpus": [], "source": None, "why": ...}."""
    out = {"time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host_load": _load()}
    for source, read in (("nvml", _from_nvml), ("nvidia-smi", _from_smi)):
        try:
            gpus = read()
        except Exception as e:  # noqa: BLE001 - a missing library or tool is a reason, said
            out.setdefault("tried", []).append(f"{source}: {e}")
            continue
        return {**out, "gpus": gpus, "source": source}
    return {**out, "gpus": [], "source": None,
            "why": "neither NVML (pip install nvidia-ml-py) nor nvidia-smi is available: the "
                   "GPU's clocks, power and other processes were not recorded"}


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _from_nvml() -> list[dict]:
    import pynvml as nv

    nv.nvmlInit()
    try:
        gpus = []
        for i in range(nv.nvmlDeviceGetCount()):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            gpus.append({
                "index": i, "name": name.decode() if isinstance(name, bytes) else name,
                "sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
                "mem_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
                "power_w": round(nv.nvmlDeviceGetPowerUsage(h) / 1000, 1),
                "temp_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
                "processes": sorted(p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(h))})
        return gpus
    finally:
        nv.nvmlShutdown()


def _number(text: str) -> float | None:
    try:
        return float(text.strip().split()[0])
    except (ValueError, IndexError):
        return None


def _from_smi() -> list[dict]:
    smi = shutil.which("nvidia-smi")
    if not smi:
        raise FileNotFoundError("nvidia-smi not on PATH")
    q = subprocess.run([smi, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=20, check=True)
    gpus = []
    for line in q.stdout.strip().splitlines():
        f = [x.strip() for x in line.split(",")]
        if len(f) < len(SMI_FIELDS):
            continue
        gpus.append({"index": int(f[0]), "name": f[1], "sm_mhz": _number(f[2]),
                     "mem_mhz": _number(f[3]), "power_w": _number(f[4]),
                     "temp_c": _number(f[5]), "processes": []})
    p = subprocess.run([smi, "--query-compute-apps=gpu_uuid,pid", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=20)
    u = subprocess.run([smi, "--query-gpu=index,uuid", "--format=csv,noheader"],
                       capture_output=True, text=True, timeout=20)
    index = {x.split(",")[1].strip(): int(x.split(",")[0]) for x in u.stdout.splitlines()
             if x.count(",") == 1}
    for line in p.stdout.splitlines():
        if line.count(",") == 1 and line.split(",")[0].strip() in index:
            uuid, pid = (x.strip() for x in line.split(","))
            gpus[index[uuid]]["processes"].append(int(pid))
    return gpus
