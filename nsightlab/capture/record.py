"""``nsightlab capture``: run a workload under Nsight Systems and/or Nsight Compute and keep a
self-describing capture that every other command opens by name.

A capture is ``<store>/<name>/``: ``manifest.json`` (what ran, with which tools and versions, on
which GPU, how it ended, every artifact with its size and sha256), ``report.nsys-rep`` and its
``report.sqlite`` export, ``report.ncu-rep``, preset outputs (trtexec / ONNX Runtime JSON and
their Parquet tables), ``logs/`` and the Parquet ``cache/``. It is built in a hidden temporary
folder of the store and renamed into place at the end, so an interrupted capture leaves
nothing behind; a workload that fails keeps its partial report and logs, marked
``status: failed`` with the exit code. An existing capture is replaced only with ``force``.

``plan`` builds every step's argv as a list (never a shell string): what ``--dry-run`` prints.
"""
from __future__ import annotations

import contextlib
import copy
import fcntl
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, fields
from pathlib import Path

from nsightlab.errors import NoDataError, NsightlabError, UsageError
from nsightlab.capture import machine
from nsightlab.read import nsys_export as nsys_cli
from nsightlab.read.locate import capture_dirs, default_store

DEFAULT_TRACE = "cuda,nvtx,osrt,cublas,cudnn"
PRECISION_FLAGS = {"fp16": ["--fp16"], "bf16": ["--bf16"], "int8": ["--int8"], "best": ["--best"],
                   # quantized (Q/DQ) models keep the precisions their graph says
                   "fp8": ["--stronglyTyped"], "nvfp4": ["--stronglyTyped"],
                   "mxfp8": ["--stronglyTyped"], "strongly-typed": ["--stronglyTyped"]}
NCU_HINT = ("install Nsight Compute (CUDA toolkit) and put ncu on PATH, or pass --ncu-path / "
            "set NSIGHTLAB_NCU")
NCU_MODES = ("all", "auto")
#: what the ncu step's selection reads in a plan of --ncu-mode auto (a dry run): it is chosen
#: from the nsys trace once nsys has run
NCU_AUTO_PLACEHOLDER = "<auto: kernels chosen from report.sqlite after nsys>"
TRTEXEC_HINT = ("install TensorRT (trtexec ships in its bin/ folder) and put trtexec on PATH, "
                "or pass --trtexec-path / set NSIGHTLAB_TRTEXEC")


@dataclass
class Options:
    """Everything ``nsightlab capture`` takes (the CLI maps its flags onto this)."""

    name: str
    command: list[str] = field(default_factory=list)
    store: Path | None = None
    force: bool = False
    # Nsight Systems
    use_nsys: bool = True
    nsys_path: str | None = None
    trace: str = DEFAULT_TRACE
    gpu_metrics: bool = False
    memory: bool = False  # --cuda-memory-usage=true: every GPU allocation and free
    sample: bool = False
    nsys_args: list[str] = field(default_factory=list)
    # Nsight Compute
    use_ncu: bool = False
    ncu_path: str | None = None
    ncu_set: str = "full"
    ncu_kernels: str | None = None
    ncu_nvtx: str | None = None
    ncu_count: int | None = None
    # "all": every kernel (or the ones the selection flags pick); "auto": the kernels that make
    # up the loop's time in the nsys trace, one launch per configuration (``auto_selection``)
    ncu_mode: str = "all"
    ncu_args: list[str] = field(default_factory=list)
    # presets
    trtexec: str | None = None
    trtexec_path: str | None = None
    precision: str = "fp16"
    shapes: str | None = None
    batch: int | None = None
    cuda_graph: bool = False
    no_data_transfers: bool = False
    iterations: int = 20
    warmup_ms: int = 200
    ort: str | None = None
    ep: str = "cpu"
    ort_shapes: list[str] = field(default_factory=list)
    warmup: int = 5
    io_binding: bool = False
    # runs: the workload this many times, each run its own report (runs/N/ from the second)
    repeat: int = 1

    def __post_init__(self) -> None:
        """Accept what a command line gives: tuples, flag strings, a store as text."""
        self.command = list(self.command)
        self.ort_shapes = list(self.ort_shapes)
        for name in ("nsys_args", "ncu_args"):
            value = getattr(self, name)
            setattr(self, name, shlex.split(value) if isinstance(value, str) else list(value))
        self.store = Path(self.store) if self.store else None

    def validate(self, check_files: bool = True) -> None:
        """NsightlabError for options that cannot make a capture: a bad name, not exactly
        one workload (a command, ``trtexec`` or ``ort``), a missing model file."""
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", self.name):
            raise NsightlabError(f"{self.name!r}: a capture name uses letters, digits, '.', '_' "
                                 "and '-' and starts with a letter or digit")
        given = [w for w, on in (("-- COMMAND", self.command), ("--trtexec", self.trtexec),
                                 ("--ort", self.ort)) if on]
        if len(given) != 1:
            raise UsageError(
                "give exactly one workload: -- COMMAND..., --trtexec MODEL.onnx or --ort "
                f"MODEL.onnx ({'got ' + ' and '.join(given) if given else 'none given'})")
        for model in (self.trtexec, self.ort):
            if check_files and model and not Path(model).is_file():
                raise NsightlabError(f"{model}: no such model file")
        if self.io_binding and not self.ort:
            raise UsageError("--io-binding is an ONNX Runtime option: give it with --ort MODEL.onnx")
        if self.ort and self.cuda_graph and self.ep != "cuda":
            raise UsageError("--cuda-graph with --ort is the CUDA EP's enable_cuda_graph: give "
                             "--ep cuda")
        if self.repeat < 1:
            raise UsageError(f"--repeat {self.repeat}: give the number of runs, 1 or more")
        if self.repeat > 1 and not self.use_nsys:
            raise UsageError("--repeat runs the workload under nsys again: it needs nsys "
                             "(leave out --no-nsys)")
        if self.precision not in PRECISION_FLAGS:
            raise UsageError(f"--precision {self.precision}: give one of "
                             f"{', '.join(PRECISION_FLAGS)}")
        if self.ncu_count is not None and self.ncu_count < 1:
            raise NsightlabError(f"--ncu-count {self.ncu_count}: give a positive number of kernels")
        if self.ncu_mode not in NCU_MODES:
            raise UsageError(f"--ncu-mode {self.ncu_mode}: give one of {', '.join(NCU_MODES)}")
        if self.ncu_mode == "auto":
            given = [flag for flag, v in (("--ncu-kernels", self.ncu_kernels),
                                          ("--ncu-nvtx", self.ncu_nvtx),
                                          ("--ncu-count", self.ncu_count)) if v is not None]
            if given:
                raise NsightlabError(
                    f"--ncu-mode auto chooses the kernels itself: leave out {' and '.join(given)}, "
                    "or use --ncu-mode all to choose them yourself")
            if not self.use_ncu:
                raise NsightlabError("--ncu-mode auto picks the kernels for Nsight Compute: give "
                                     "it with --ncu")
            if not self.use_nsys:
                raise NsightlabError("--ncu-mode auto chooses the kernels from the nsys trace: "
                                     "leave out --no-nsys (or use --ncu-mode all)")


@dataclass
class Step:
    """One step of a capture: its name, exact argv and kind (build, workload or export)."""

    name: str
    argv: list[str]
    kind: str = "build"

    @property
    def workload(self) -> bool:
        """Its exit code is the workload's."""
        return self.kind == "workload"

    def __str__(self) -> str:
        return f"[{self.name}] {shlex.join(self.argv)}"


def store_dir(opts: Options) -> Path:
    return Path(opts.store) if opts.store else default_store()


def find_tool(name: str, explicit: str | None, env: str, hint: str, required: bool) -> str | None:
    """Executable for ``name`` from ``explicit``, ``$env`` or PATH (None if absent and not
    ``required``; an NsightlabError naming the tool and the fix otherwise)."""
    for cand in (explicit, os.environ.get(env)):
        if cand:
            found = shutil.which(cand)
            if found is None:
                raise NsightlabError(f"{cand}: not an executable {name}; {hint}")
            return found
    found = shutil.which(name)
    if found is None and required:
        raise NsightlabError(f"{name} was not found; {hint}")
    return found


def tool_version(path: str | None) -> str | None:
    if path is None:
        return None
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.search(r"(\d{4}\.\d+\.\d+(?:\.\d+)?)", out.stdout + out.stderr)
    return m.group(1) if m else None


def _gpu_metrics_flag(nsys: str | None) -> str:
    """nsys renamed --gpu-metrics-device to --gpu-metrics-devices (2023.x)."""
    if nsys:
        try:
            helptext = subprocess.run([nsys, "profile", "--help"], capture_output=True,
                                      text=True, timeout=60).stdout
            if "--gpu-metrics-devices" not in helptext and "--gpu-metrics-device" in helptext:
                return "--gpu-metrics-device=all"
        except (OSError, subprocess.TimeoutExpired):
            pass
    return "--gpu-metrics-devices=all"


def engine_path(opts: Options) -> Path:
    """Built engines are kept in the store and reused: build once, profile many times."""
    model = Path(opts.trtexec)
    try:
        st = model.stat()
        ident = f"{model.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    except OSError:
        ident = str(model)
    key = hashlib.sha1(f"{ident}|{opts.precision}|{opts.shapes}|{opts.batch}".encode()).hexdigest()
    return store_dir(opts) / ".engines" / f"{model.stem}-{opts.precision}-{key[:12]}.plan"


def plan(opts: Options, workdir: Path, tools: dict[str, str | None],
         ncu_selection: list[str] | None = None) -> list[Step]:
    """The steps of a capture, in order, with their exact argv: building a TensorRT engine
    (once), the workload under nsys and/or ncu (or alone), and the SQLite export.

    With ``ncu_mode`` auto the ncu step comes after the export, its kernel selection
    ``ncu_selection`` (``auto_selection``'s arguments, chosen once the trace exists;
    ``NCU_AUTO_PLACEHOLDER`` until then)."""
    steps: list[Step] = []
    if opts.trtexec:
        trt = tools.get("trtexec") or "trtexec"
        engine = engine_path(opts)
        shapes = [f"--shapes={opts.shapes}"] if opts.shapes else []
        batch = [f"--batch={opts.batch}"] if opts.batch else []
        if not engine.is_file():
            steps.append(Step("build-engine", [
                trt, f"--onnx={opts.trtexec}", f"--saveEngine={engine}",
                f"--timingCacheFile={store_dir(opts) / '.engines' / 'timing.cache'}",
                *PRECISION_FLAGS[opts.precision], *shapes, *batch, "--skipInference"]))
        workload = [
            trt, f"--loadEngine={engine}", "--profilingVerbosity=detailed",
            f"--exportProfile={workdir / 'trtexec.profile.json'}",
            f"--exportLayerInfo={workdir / 'trtexec.layers.json'}",
            f"--exportTimes={workdir / 'trtexec.times.json'}", "--separateProfileRun",
            f"--iterations={opts.iterations}", f"--warmUp={opts.warmup_ms}", "--duration=0",
            *shapes, *batch, *(["--useCudaGraph"] if opts.cuda_graph else []),
            *(["--noDataTransfers"] if opts.no_data_transfers else [])]
    elif opts.ort:
        workload = [sys.executable, "-m", "nsightlab.runners.ort", str(Path(opts.ort).resolve()),
                    "--ep", opts.ep, "--iterations", str(opts.iterations),
                    "--warmup", str(opts.warmup),
                    *[a for s in opts.ort_shapes for a in ("--shape", s)],
                    *(["--io-binding"] if opts.io_binding else []),
                    *(["--cuda-graph"] if opts.cuda_graph else []),
                    "--profile", str(workdir / "ort_profile.json"),
                    "--report", str(workdir / "ort_run.json")]
    else:
        if not opts.command:
            raise NsightlabError("nothing to capture: give -- COMMAND..., --trtexec MODEL.onnx "
                                 "or --ort MODEL.onnx")
        workload = list(opts.command)
    if opts.use_nsys:
        sampling = ["--sample=cpu"] if opts.sample else ["--sample=none", "--cpuctxsw=none"]
        gpu = [_gpu_metrics_flag(tools.get("nsys"))] if opts.gpu_metrics else []
        gpu += ["--cuda-memory-usage=true"] if opts.memory else []
        steps.append(Step("nsys", [
            tools.get("nsys") or "nsys", "profile", f"--trace={opts.trace}",
            *(["--cuda-graph-trace=node"] if "cuda" in opts.trace.split(",") else []),
            *sampling, *gpu, "--force-overwrite=true", f"--output={workdir / 'report'}",
            *opts.nsys_args, *workload], kind="workload"))
    auto = opts.use_ncu and opts.ncu_mode == "auto"
    if opts.use_ncu:
        selection = []
        if auto:
            selection = list(ncu_selection) if ncu_selection is not None else [NCU_AUTO_PLACEHOLDER]
        if opts.ncu_kernels:
            selection += ["--kernel-name", f"regex:{opts.ncu_kernels}"]
        if opts.ncu_nvtx:
            selection += ["--nvtx", "--nvtx-include", opts.ncu_nvtx]
        if opts.ncu_count:
            selection += ["--launch-count", str(opts.ncu_count)]
        steps.append(Step("ncu", [
            tools.get("ncu") or "ncu", "--set", opts.ncu_set, *selection, "--force-overwrite",
            "--export", str(workdir / "report"), *opts.ncu_args, *workload], kind="workload"))
    if not opts.use_nsys and not opts.use_ncu:
        steps.append(Step("run", workload, kind="workload"))
    if opts.use_nsys:
        steps.append(Step("export", nsys_cli.export_argv(
            tools.get("nsys") or "nsys", workdir / "report.nsys-rep", workdir / "report.sqlite"),
            kind="export"))
    if auto:  # the ncu step is chosen from the export: it runs after it
        steps.sort(key=lambda s: s.name == "ncu")
    return steps


def auto_selection(sqlite_path: str | os.PathLike,
                   cache_root: str | os.PathLike | None = None) -> tuple[list[str], dict]:
    """The ncu arguments of ``--ncu-mode auto`` for the nsys trace ``sqlite_path``: the
    kernels of its loop that make up the first 80% of the loop's kernel time
    (``kernels.join.in_loop``'s ``top``), by function name, each launch configuration profiled
    once (``--filter-mode per-launch-config --launch-count 1``), past its first launch when the
    loop ran more than 2 iterations (``--launch-skip 1``: warm-up). Returns (the arguments,
    what was chosen: kernels, share_pct of the loop's kernel time, configurations,
    iterations).

    Raises ValueError or NoDataError when the trace has no loop (``in_loop``)."""
    from nsightlab.kernels import join

    if cache_root is not None:
        from nsightlab.read.report import Report

        report = Report(Path(sqlite_path), cache_root=Path(cache_root))
    else:
        from nsightlab.read.opener import open as open_report

        report = open_report(sqlite_path)
    with report as r:
        g, _wall, iterations = join.in_loop(r)
    top = g[g["top"]]
    if top.empty:
        raise ValueError("the loop has no kernels")
    functions = list(dict.fromkeys(top["function"]))
    total = float(g["time_ns"].sum())
    share = round(100 * float(top["time_ns"].sum()) / total, 1) if total else 0.0
    args = ["--kernel-name-base", "function",
            "--kernel-name", f"regex:^({'|'.join(re.escape(f) for f in functions)})$",
            "--filter-mode", "per-launch-config", "--launch-count", "1"]
    if iterations > 2:
        args += ["--launch-skip", "1"]
    return args, {"kernels": functions, "share_pct": share, "configurations": len(top),
                  "iterations": int(iterations)}


def resolve_tools(opts: Options, dry_run: bool) -> dict[str, str | None]:
    """Tool paths; missing ones are an error (or, for a dry run, their bare names)."""
    need = not dry_run
    return {
        "nsys": find_tool("nsys", opts.nsys_path, "NSIGHTLAB_NSYS", nsys_cli.INSTALL_HINT,
                          need and opts.use_nsys) if opts.use_nsys else None,
        "ncu": find_tool("ncu", opts.ncu_path, "NSIGHTLAB_NCU", NCU_HINT,
                         need and opts.use_ncu) if opts.use_ncu else None,
        "trtexec": find_tool("trtexec", opts.trtexec_path, "NSIGHTLAB_TRTEXEC", TRTEXEC_HINT,
                             need) if opts.trtexec else None,
    }


def _run(step: Step, logs: Path, echo) -> int:
    """Run one step, its output teed to logs/<step>.log and to ``echo`` line by line."""
    logs.mkdir(parents=True, exist_ok=True)
    with (logs / f"{step.name}.log").open("w") as log:
        log.write(f"$ {shlex.join(step.argv)}\n")
        log.flush()
        try:
            # its own process group: a stop reaches nsys and every process of the workload
            proc = subprocess.Popen(step.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, text=True, errors="replace",
                                    start_new_session=True)
        except OSError as e:
            log.write(f"cannot start: {e}\n")
            raise NsightlabError(f"cannot run {step.argv[0]} ({e.strerror}); check the command") from None
        try:
            for line in proc.stdout:
                log.write(line)
                if echo is not None:
                    echo(line.rstrip("\n"))
            return proc.wait()
        except BaseException:
            stop_group(proc)
            raise


#: seconds a stopped step gets to finish after SIGINT (nsys finalizes or discards its files),
#: then after SIGTERM, before SIGKILL
STOP_GRACE_S = (20.0, 5.0)


def stop_group(proc: subprocess.Popen) -> None:
    """Stop a step the way nsys expects: SIGINT to its whole process group (nsys stops
    collecting and cleans up; the workload gets its Ctrl-C), then SIGTERM, then SIGKILL for
    whatever is left, so no process of the workload outlives the capture."""
    for sig, grace in ((signal.SIGINT, STOP_GRACE_S[0]), (signal.SIGTERM, STOP_GRACE_S[1]),
                       (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            continue
        if not _group_alive(proc.pid):
            break
    if proc.poll() is None:
        proc.wait()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a capture: handled like Ctrl-C (the capture is dropped)."""


@contextlib.contextmanager
def _signals_interrupt():
    """While a capture runs, SIGINT raises KeyboardInterrupt and SIGTERM and SIGHUP raise
    ``Interrupted`` in the main thread, whatever was inherited: a shell starts a background
    job with SIGINT ignored, and an ignored signal would stay ignored in the workload too (a
    handled one is reset to the default in every program started)."""
    def raise_(signum, frame):
        raise Interrupted(signal.Signals(signum).name)

    old = {}
    if threading.current_thread() is threading.main_thread():
        old[signal.SIGINT] = signal.signal(signal.SIGINT, signal.default_int_handler)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, raise_)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def _name_lock(store: Path, name: str):
    """One capture per name at a time: an exclusive lock on ``<store>/.<name>.lock``."""
    lock = store / f".{name}.lock"
    f = lock.open("a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        f.seek(0)
        who = f.read().strip() or "another process"
        f.close()
        raise NsightlabError(f"{store / name}: capture {name!r} is being made right now by "
                             f"{who}; wait for it to finish or choose another name") from None
    f.seek(0)
    f.truncate()
    f.write(f"nsightlab pid {os.getpid()}")
    f.flush()
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)
        f.close()


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def capture(opts: Options, echo=None, progress=None) -> Path:
    """Run the capture described by ``opts``; returns the capture folder.

    Raises NsightlabError for bad options or missing tools (before anything runs), and after
    a failed workload (the capture is kept, ``status: failed``). One capture per name at a
    time (a second one is refused); SIGINT, SIGTERM and SIGHUP stop the steps' process groups
    and leave nothing in the store.
    """
    return capture_many([opts], echo, progress)[0]


def configurations(opts: Options) -> list[Options]:
    """The captures that ``opts`` asks for: one per name of ``NAME[,NAME...]``, ``{name}`` in
    the command and in every text option replaced by that name (``fp16,bf16 -- python
    bench.py {name}``). One name is ``opts`` itself."""
    names = opts.name.split(",")
    if len(names) == 1:
        return [opts]
    if len(set(names)) != len(names):
        raise UsageError(f"{opts.name}: each name once")
    out = []
    for name in names:
        each = copy.deepcopy(opts)
        each.name = name
        for f in fields(Options):
            v = getattr(each, f.name)
            if isinstance(v, str):
                setattr(each, f.name, v.replace("{name}", name))
            elif isinstance(v, list):
                setattr(each, f.name, [x.replace("{name}", name) if isinstance(x, str) else x
                                       for x in v])
        out.append(each)
    return out


def capture_many(configs: list[Options], echo=None, progress=None) -> list[Path]:
    """Capture several configurations to be compared, their runs interleaved (A1 B1 A2 B2
    ..., with ``repeat``), so that a drift of the machine's pace falls on every side alike;
    returns their folders. A workload that fails keeps its capture (``status: failed``) and
    the others go on; the error after the last run names it. As ``capture`` otherwise."""
    with _signals_interrupt(), contextlib.ExitStack() as locks:
        for opts in configs:
            opts.validate()
        stores = [store_dir(o) for o in configs]
        tools = [resolve_tools(o, dry_run=False) for o in configs]
        for store in stores:
            store.mkdir(parents=True, exist_ok=True)
        for opts, store in zip(configs, stores):
            locks.enter_context(_name_lock(store, opts.name))
            if (store / opts.name).exists() and not opts.force:
                raise NsightlabError(f"{store / opts.name}: a capture named {opts.name!r} exists; "
                                     "choose another name or pass --force to replace it")
        say = progress or (lambda msg: None)
        each = [_Making(o, s, s / o.name, t) for o, s, t in zip(configs, stores, tools)]
        tells = [(lambda msg, n=o.name: say(f"{n}: {msg}")) if len(each) > 1 else say
                 for o in configs]
        try:
            for m, tell in zip(each, tells):
                m.first(echo, tell)
            for run in range(2, max(o.repeat for o in configs) + 1):
                for m, tell in zip(each, tells):
                    if run <= m.opts.repeat and not m.manifest["exit_code"]:
                        m.again(run, echo, tell)
            paths = [m.end(say) for m in each]
        except BaseException:  # Ctrl-C included: nothing half-written stays behind
            for m in each:
                m.drop()
            raise
    failed = [m for m in each if m.manifest["status"] != "ok"]
    if failed:
        raise NsightlabError("; ".join(
            f"capture {m.opts.name!r} failed: {'; '.join(m.manifest['messages']) or 'see its logs'}"
            f"; the partial capture is kept in {m.final} (status: failed)" for m in failed))
    return paths


class _Making:
    """One capture being made, in its temporary folder: its first run (with the engine build,
    ncu and the export), the runs again (``repeat``), then the artifacts and the rename."""

    def __init__(self, opts: Options, store: Path, final: Path, tools: dict) -> None:
        from nsightlab._version import __version__

        self.opts, self.final, self.tools = opts, final, tools
        if opts.trtexec:
            engine_path(opts).parent.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix=f".{opts.name}.tmp-", dir=store))
        self.manifest: dict = {
            "name": opts.name, "nsightlab_version": __version__,
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "preset": _preset(opts), "command": None, "steps": [], "status": "running",
            "tools": {k: {"path": v, "version": tool_version(v) if k != "trtexec" else None}
                      for k, v in tools.items() if v},
            "messages": [], "problems": [], "exit_code": 0,
        }

    def first(self, echo, say) -> None:
        steps = plan(self.opts, self.work, self.tools)
        manifest = self.manifest
        manifest["command"] = next((s.argv for s in steps if s.workload), None)
        manifest["runs"] = [{"run": 1, "sqlite": "report.sqlite",
                             "machine_before": machine.state()}]
        # --ncu-mode auto: ncu runs after the export, on the kernels chosen from it
        later = [s for s in steps if s.name == "ncu" and self.opts.ncu_mode == "auto"]
        manifest["exit_code"] = _run_steps(
            [s for s in steps if s.kind != "export" and s not in later], self.work, manifest,
            echo, say)
        manifest["runs"][0]["machine_after"] = machine.state()
        if any(step.kind == "export" for step in steps):
            _export(self.work, self.tools, manifest, say)
        if later and not manifest["exit_code"]:
            manifest["exit_code"] = _run_steps([self._auto_ncu(say)], self.work, manifest,
                                               echo, say)

    def _auto_ncu(self, say) -> Step:
        """The ncu step of --ncu-mode auto: the kernels ``auto_selection`` chooses from the
        export, or every kernel (with a note why) where the trace shows no loop."""
        sqlite = self.work / "report.sqlite"
        try:
            if not sqlite.is_file():
                raise ValueError("nsys left no SQLite export")
            selection, chosen = auto_selection(sqlite, cache_root=self.work / "cache")
        except (ValueError, NoDataError) as e:
            why = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            note = (f"ncu --ncu-mode auto: no loop to choose kernels from ({why}); profiling "
                    "every kernel instead")
            say(note)
            self.manifest["messages"].append(note)
            self.manifest["ncu_auto"] = {"kernels": None, "fallback": why}
            selection = []
        else:
            self.manifest["ncu_auto"] = chosen
            say(f"ncu: profiling {len(chosen['kernels'])} kernels that make up "
                f"{chosen['share_pct']:g}% of the loop's kernel time, one launch per "
                "configuration")
        return next(s for s in plan(self.opts, self.work, self.tools, ncu_selection=selection)
                    if s.name == "ncu")

    def again(self, run: int, echo, say) -> None:
        """Run ``run`` with --repeat: the workload under nsys again (not the engine build, not
        ncu), its report and SQLite export in runs/RUN/, the machine's state around it."""
        opts, work, manifest = self.opts, self.work, self.manifest
        into = work / "runs" / str(run)
        into.mkdir(parents=True)
        steps = [s for s in plan(opts, into, self.tools) if s.name in ("nsys", "export")]
        for step in steps:
            step.name = f"{step.name}-{run}"
        say(f"run {run} of {opts.repeat}")
        entry = {"run": run, "sqlite": f"runs/{run}/report.sqlite",
                 "machine_before": machine.state()}
        manifest["runs"].append(entry)
        rc = _run_steps([s for s in steps if s.kind != "export"], work, manifest, echo, say)
        entry["machine_after"] = machine.state()
        if rc:
            manifest["exit_code"] = rc
            return
        if (into / "report.nsys-rep").is_file():
            say(f"export: runs/{run}/report.nsys-rep -> report.sqlite")
            try:
                nsys_cli.export_sqlite(into / "report.nsys-rep", into / "report.sqlite",
                                       Path(self.tools["nsys"]))
            except NsightlabError as e:
                manifest["problems"].append(f"run {run}: {e}")
        else:
            manifest["problems"].append(f"run {run}: nsys wrote no report; see logs/nsys-{run}.log")

    def end(self, say) -> Path:
        _collect(self.work, self.manifest, say)
        _say_machine(self.manifest)
        _finish(self.work, self.final, self.manifest)
        self.work = None
        return self.final

    def drop(self) -> None:
        if self.work is not None:
            shutil.rmtree(self.work, ignore_errors=True)


def _say_machine(manifest: dict) -> None:
    """The machine's state in the manifest's messages, once: where it could not be read,
    or what stands out (other processes on the GPU, a loaded host)."""
    runs = manifest.get("runs", [])
    why = next((r["machine_before"].get("why") for r in runs
                if r.get("machine_before", {}).get("why")), None)
    if why:
        manifest["messages"].append(why)
        return
    said = dict.fromkeys(w for r in runs
                         for w in machine.words(r.get("machine_before"), r.get("machine_after")))
    manifest["messages"] += list(said)


def _run_steps(steps: list[Step], work: Path, manifest: dict, echo, say) -> int:
    """Run the steps in order until one fails; returns the exit code that ends the run."""
    for step in steps:
        say(f"{step.name}: {shlex.join(step.argv)}")
        t0 = time.perf_counter()
        rc = _run(step, work / "logs", echo)
        manifest["steps"].append({"name": step.name, "argv": step.argv, "exit_code": rc,
                                  "seconds": round(time.perf_counter() - t0, 3)})
        if rc != 0:
            manifest["messages"].append(f"{step.name} exited with code {rc}; see logs/{step.name}.log")
            return rc
    return 0


def _finish(work: Path, final: Path, manifest: dict) -> None:
    """Status, artifacts with sha256 and manifest.json, then the rename into place."""
    problems = manifest.pop("problems")
    manifest["messages"] += problems
    manifest["status"] = "ok" if manifest["exit_code"] == 0 and not problems else "failed"
    manifest["ended"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    manifest["artifacts"] = [
        {"path": str(p.relative_to(work)), "bytes": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(work.rglob("*")) if p.is_file() and "cache" not in p.relative_to(work).parts]
    # paths inside the capture were recorded under the temporary folder's name
    text = json.dumps(manifest, indent=1, default=str).replace(str(work), str(final))
    (work / "manifest.json").write_text(text)
    if final.exists():
        shutil.rmtree(final)
    os.replace(work, final)


def _preset(opts: Options) -> dict | None:
    if opts.trtexec:
        return {"name": "trtexec", "model": str(opts.trtexec), "precision": opts.precision,
                "shapes": opts.shapes, "batch": opts.batch, "cuda_graph": opts.cuda_graph,
                "no_data_transfers": opts.no_data_transfers, "iterations": opts.iterations,
                "warmup_ms": opts.warmup_ms}
    if opts.ort:
        return {"name": "ort", "model": str(opts.ort), "ep": opts.ep, "shapes": opts.ort_shapes,
                "iterations": opts.iterations, "warmup": opts.warmup,
                "io_binding": opts.io_binding, "cuda_graph": opts.cuda_graph}
    return None


def _export(work: Path, tools: dict, manifest: dict, say) -> None:
    """The export step: report.nsys-rep -> report.sqlite, or why there is nothing to export."""
    rep, qdstrm = work / "report.nsys-rep", work / "report.qdstrm"
    problems = manifest["problems"]
    if not rep.is_file():
        if qdstrm.is_file():
            importer = Path(tools["nsys"] or "nsys").resolve().parent
            problems.append(
                "nsys left only report.qdstrm (its importer was not found): import it with "
                f"QdstrmImporter -i report.qdstrm (it ships with nsys, e.g. under {importer}/../"
                "host-linux-x64/), then nsys export --type sqlite report.nsys-rep")
        else:
            problems.append("nsys wrote no report; see logs/nsys.log")
        return
    say("export: report.nsys-rep -> report.sqlite")
    try:
        nsys_cli.export_sqlite(rep, work / "report.sqlite", Path(tools["nsys"]))
        manifest["nsys_rep"], manifest["sqlite"] = "report.nsys-rep", "report.sqlite"
    except NsightlabError as e:
        problems.append(str(e))


def _collect(work: Path, manifest: dict, say) -> None:
    """After the steps: parse the artifacts to Parquet, fill the manifest, build the cache."""
    from nsightlab.capture import exporters

    problems = manifest["problems"]
    for src in sorted(work.glob("*.json")):
        try:
            for out in exporters.export_file(src, work):
                manifest.setdefault("tables", []).append(out.name)
        except NsightlabError as e:
            problems.append(str(e))
    for src in sorted(work.glob("*.ncu-rep")):
        _export_ncu(src, work, manifest, say)
    if (work / "report.ncu-rep").is_file():
        manifest["ncu_rep"] = "report.ncu-rep"
    if (work / "ort_run.json").is_file():
        run = json.loads((work / "ort_run.json").read_text())
        manifest["ort"] = {k: run.get(k) for k in ("ep_requested", "providers_used",
                                                    "providers_available", "fallback", "nvtx")}
        if run.get("fallback"):
            manifest["messages"].append(
                f"{run['providers_requested'][0]} was not available; ran on {run['providers_used'][0]}")
    if (work / "report.sqlite").is_file():
        from nsightlab.read.report import Report

        try:
            with Report(work / "report.sqlite", cache_root=work / "cache") as report:
                manifest["gpus"] = report.gpus.to_dict("records")
                manifest["nsys_export_version"] = report.nsys_version
                report.prefetch(["kernels", "cuda_api", "nvtx", "memcpy", "memset", "syncs"])
        except NsightlabError as e:
            problems.append(str(e))


def _export_ncu(src: Path, work: Path, manifest: dict, say) -> None:
    """An .ncu-rep to Parquet in a child process: NVIDIA's report library has crashed on
    real captures, and a crash must not take the capture with it."""
    say(f"export: {src.name} -> Parquet")
    proc = subprocess.run([sys.executable, "-m", "nsightlab", "export", str(src), "-o", str(work)],
                          capture_output=True, text=True)
    if proc.returncode == 0:
        manifest.setdefault("tables", []).extend(Path(p).name for p in proc.stdout.split())
        return
    why = (proc.stdout + proc.stderr).strip().splitlines()
    manifest["messages"].append(
        f"{src.name} was captured but could not be exported to Parquet "
        f"({why[-1] if why else f'exit code {proc.returncode}'}); read it with "
        "nsightlab.open_ncu or export it again with nsightlab export")


def list_captures(store: Path | None = None) -> list[dict]:
    """Every capture in the store (and one level down in it, as ``locate.capture_dirs``
    finds them): name, created, preset, gpu, status, size_bytes, path."""
    rows = []
    for m in (d / "manifest.json" for d in capture_dirs(Path(store) if store else None)):
        try:
            man = json.loads(m.read_text())
        except ValueError:
            man = {"status": "unreadable manifest"}
        size = sum(p.stat().st_size for p in m.parent.rglob("*") if p.is_file())
        gpus = man.get("gpus") or []
        preset = man.get("preset") or {}
        rows.append({"name": m.parent.name, "created": man.get("started", ""),
                     "preset": preset.get("name", "command") if isinstance(preset, dict) else preset,
                     "gpu": ", ".join(sorted({g.get("name", "?") for g in gpus})) or man.get("gpu", ""),
                     "status": man.get("status", "?"), "size_bytes": size, "path": str(m.parent)})
    return rows


def captures_table(store: Path | None = None):
    """``list_captures`` as a DataFrame: name, created, preset, gpu, status, size_mib (a
    capture's folder is the store's folder of that name)."""
    import pandas as pd

    df = pd.DataFrame(list_captures(store), columns=["name", "created", "preset", "gpu", "status",
                                                     "size_bytes"])
    df["size_mib"] = (df.pop("size_bytes") / 2**20).round(1)
    return df
