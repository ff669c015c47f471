"""Nsight Compute reports parsed once into Parquet: ``nsightlab.open`` of an ``.ncu-rep``.

The first open walks the report with ``ncu_report`` (``formats.ncu.NcuReport.each``), in
worker processes that each read a share of the kernels (the wheel's per-kernel decode is the
slow part), and writes three tables into the cache folder keyed by the file (a capture's own
``cache/`` when the report is in one):

- ``kernels``: one row per profiled kernel: kernel (0-based), range, id, name, function, nvtx,
  grid and block, stream, device, and the key metrics of ``formats.ncu.NcuReport.kernels``;
- ``metrics``: every metric of every kernel, long: kernel, metric, value (NaN for text), text,
  unit;
- ``rules``: NVIDIA's rule results as ncu states them (``formats.ncu.rule_rows``).

Later opens read the Parquet (``values`` pivots the metrics a caller names). A report cut short
gives the kernels before the cut, with a warning (``warnings``).
"""
from __future__ import annotations

import json
import lzma
import os
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from nsightlab.errors import CacheError, CorruptReportError, NotAReportError
from nsightlab.formats import ncu
from nsightlab.read.table_cache import build_dir, default_root, keyed_dir, remove_stale

#: bump when the tables' content changes: older caches are parsed again
VERSION = 1
_METRICS_SCHEMA = pa.schema([("kernel", pa.int32()),
                             ("metric", pa.dictionary(pa.int32(), pa.string())),
                             ("value", pa.float64()), ("text", pa.string()),
                             ("unit", pa.dictionary(pa.int32(), pa.string()))])


class NcuStore:
    """One Nsight Compute report, parsed once (see the module docstring). ``kernels()``,
    ``metrics()``, ``rules()``, ``values(names)``; ``warnings`` (a cut report), ``info()``."""

    kind = "ncu"

    def __init__(self, path: str | os.PathLike, cache_dir: str | os.PathLike | None = None,
                 folder: Path | None = None, progress=None, workers: int | None = None):
        self.path = Path(path)
        if not self.path.is_file():
            raise NotAReportError(f"{self.path}: no such file; give an Nsight Compute report "
                                  "(.ncu-rep)")
        root = Path(cache_dir) if cache_dir else default_root()
        self.folder = (folder or keyed_dir(root, self.path)) / f"ncu-v{VERSION}"
        meta = self.folder / "meta.json"
        if not meta.is_file():
            _parse(self.path, self.folder, progress, workers)
        self.meta = json.loads(meta.read_text())
        self.warnings: list[str] = []
        if not self.meta["whole"]:
            self.warnings.append(
                f"{self.path}: cut short (its last record runs to byte "
                f"{self.meta['expected_bytes']:,} of a {self.meta['size']:,}-byte report): read the "
                f"{self.meta['kernels']} kernels before the cut, the rest are lost; copy the "
                "report again")
        self._kernels: pd.DataFrame | None = None

    def __enter__(self) -> "NcuStore":
        return self

    def __exit__(self, *exc) -> None:
        return None

    def close(self) -> None:
        return None

    def kernels(self) -> pd.DataFrame:
        """One row per profiled kernel (see the module docstring); ``attrs["metrics"]``: the
        metric each key column was read from."""
        if self._kernels is None:
            k = pd.read_parquet(self.folder / "kernels.parquet")
            k.attrs["metrics"] = self.meta["key_metrics"]
            self._kernels = k
        return self._kernels.copy()

    def metrics(self, names: list[str] | None = None) -> pd.DataFrame:
        """Every metric of every kernel (or the metrics ``names``), long form."""
        t = pq.read_table(self.folder / "metrics.parquet", filters=_only(names))
        out = t.to_pandas()
        for c in ("metric", "unit"):
            out[c] = out[c].astype(str)
        return out

    def rules(self) -> pd.DataFrame:
        """NVIDIA's rule results, one row per result: kernel and ``formats.ncu.rule_rows``."""
        return pd.read_parquet(self.folder / "rules.parquet")

    def values(self, names: list[str]) -> pd.DataFrame:
        """The numeric metrics ``names`` per kernel: index kernel, one column per name (NaN
        where a kernel has none)."""
        long = pq.read_table(self.folder / "metrics.parquet", columns=["kernel", "metric", "value"],
                             filters=_only(names)).to_pandas()
        long["metric"] = long["metric"].astype(str)
        wide = long.pivot_table(index="kernel", columns="metric", values="value", aggfunc="first")
        return wide.reindex(index=range(self.meta["kernels"]), columns=list(names))

    def metric_names(self) -> list[str]:
        return self.meta["metric_names"]

    def info(self) -> dict:
        """What the report holds: path, kernels, devices, sections' metric count, whole."""
        k = self.kernels()
        return {"path": str(self.path), "kind": "Nsight Compute report", "kernels": len(k),
                "devices": sorted(k["device"].dropna().unique().tolist()),
                "distinct_kernels": int(k["function"].nunique()),
                "metrics_per_kernel": self.meta["metrics_per_kernel"],
                "rule_results": self.meta["rule_results"],
                "nvtx": bool(k["nvtx"].notna().any()), "whole": self.meta["whole"],
                "parse_s": self.meta["parse_s"], "warnings": list(self.warnings)}


def _only(names: list[str] | None):
    """The Parquet filter for the metrics ``names`` (None: all of them; an empty list: none:
    a name no metric has)."""
    if names is None:
        return None
    return [("metric", "in", list(names) or [""])]


def _parse(path: Path, folder: Path, progress, workers: int | None) -> None:
    """Parse ``path`` into ``folder`` (built aside, then moved in: atomic)."""
    t0 = time.perf_counter()
    parent = folder.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        remove_stale(parent)
        work = build_dir(parent, folder.name)
    except OSError as e:
        raise CacheError(f"{path}: cannot write its cache in {parent} ({e.strerror}); set "
                         "NSIGHTLAB_CACHE_DIR to a writable folder") from None
    try:
        src = path
        if path.name.endswith(".xz"):
            src = work / path.name[:-3]
            if progress is not None:
                progress(f"decompressing {path.name} ...")
            try:
                with lzma.open(path) as fin, src.open("wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
            except (lzma.LZMAError, EOFError) as e:
                raise CorruptReportError(f"{path}: not a complete xz file ({e}); copy it "
                                         "again") from None
        rep = ncu.NcuReport(src)  # checks the file; counts its kernels
        rep.path = path
        count = rep.count()
        if count == 0:
            raise NotAReportError(
                f"{path}: holds no profiled kernel" + (
                    f" (cut short: its last record runs to byte {rep.expected_bytes:,} of a "
                    f"{src.stat().st_size:,}-byte report); copy it again" if not rep.whole else
                    "; ncu profiled nothing: check its --kernel-name, --nvtx-include and "
                    "--launch-skip filters"))
        if progress is not None:
            progress(f"reading {count} kernels of {path.name} with ncu_report ...")
        n = max(1, min(workers or os.cpu_count() or 1, 4, count))
        shares = [list(range(i, count, n)) for i in range(n)]
        if n == 1:
            parts = [_share(str(src), str(path), shares[0], str(work / "metrics-0.parquet"))]
        else:
            with ProcessPoolExecutor(n) as pool:
                parts = list(pool.map(_share, [str(src)] * n, [str(path)] * n, shares,
                                      [str(work / f"metrics-{i}.parquet") for i in range(n)]))
        idents = sorted((r for p in parts for r in p[0]), key=lambda r: r["kernel"])
        rules = [r for p in parts for r in p[1]]
        names = next((p[2] for p in parts if p[2]), [])
        k = ncu.key_frame([{c: v for c, v in r.items()} for r in idents]) if idents else \
            pd.DataFrame(columns=["kernel", *ncu.KEY_COLUMNS])
        used = k.attrs.get("metrics", {})
        k.to_parquet(work / "kernels.parquet", index=False)
        pd.DataFrame(rules, columns=["kernel", "rule", "name", "section", "title", "message",
                                     "kind", "speedup_pct", "speedup_kind", "focus"]) \
            .to_parquet(work / "rules.parquet", index=False)
        tables = [pq.read_table(work / f"metrics-{i}.parquet") for i in range(n)]
        merged = pa.concat_tables(tables).unify_dictionaries() if tables else \
            _METRICS_SCHEMA.empty_table()
        merged = merged.sort_by([("kernel", "ascending")]) if merged.num_rows else merged
        pq.write_table(merged, work / "metrics.parquet", row_group_size=1 << 18)
        for i in range(n):
            (work / f"metrics-{i}.parquet").unlink()
        size = src.stat().st_size  # of the report itself (decompressed)
        if src != path:
            src.unlink()
        meta = {"version": VERSION, "source": str(path), "size": size,
                "kernels": len(idents), "whole": rep.whole, "expected_bytes": rep.expected_bytes,
                "key_metrics": used, "metric_names": names,
                "metrics_per_kernel": int(merged.num_rows / max(1, len(idents))),
                "rule_results": len(rules), "parse_s": round(time.perf_counter() - t0, 3),
                "workers": n}
        (work / "meta.json").write_text(json.dumps(meta))
        try:
            os.replace(work, folder)
        except OSError:
            if not (folder / "meta.json").is_file():  # another process won the race: fine
                raise
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _share(src: str, shown: str, kernels: list[int], out: str):
    """One worker's kernels: their metrics into ``out`` (Parquet), their identities and rule
    rows returned (small)."""
    rep = ncu.NcuReport(src)
    rep.path = Path(shown)
    idents, rules, names_seen = [], [], None
    writer = pq.ParquetWriter(out, _METRICS_SCHEMA)
    try:
        for ident, (names, values, texts, units), rrows in rep.each(only=set(kernels)):
            k = ident["kernel"]
            idents.append(ident)
            rules += [{"kernel": k, **r} for r in rrows]
            if names_seen is None:
                names_seen = names
            text = [None] * len(names)
            for i, t in texts.items():
                text[i] = t
            writer.write_table(pa.table({
                "kernel": pa.array([k] * len(names), pa.int32()),
                "metric": pa.array(names, pa.string()).dictionary_encode(),
                "value": pa.array(values, pa.float64()),
                "text": pa.array(text, pa.string()),
                "unit": pa.array(units, pa.string()).dictionary_encode()}, schema=_METRICS_SCHEMA))
    finally:
        writer.close()
    return idents, rules, names_seen or []
