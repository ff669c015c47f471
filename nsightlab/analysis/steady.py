"""Why iterations differ: the part of the time budget that makes a kind of iteration (or an
outlier, or the warm-up) differ from the main kind, and the part a trend grows
(``nsightlab.analysis.kinds`` says which iterations are which)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nsightlab.analysis.budget_parts import COPY_PARTS, COPY_WORDS
from nsightlab.analysis import kinds
from nsightlab.analysis.kinds import MAIN, OUTLIER, WARM_UP
from nsightlab.core import benchmath

#: budget parts (or groups of them), as the cause of a difference is said
CAUSES = {"kernels": "kernel time", "communication": "exposed NCCL time", "idle_host": "host work with the GPU idle",
          "idle_sync": "GPU idle after host syncs", "idle_launch": "launch overhead",
          "idle_unattributed": "GPU idle (no cause known)", "memset": "memsets"}
_BYTES = {"h2d": "h2d_bytes", "d2h": "d2h_bytes", "d2d": "d2d_bytes"}


def _parts(rows: pd.DataFrame) -> dict[str, float]:
    """Mean of every cause's part over ``rows``."""
    return {p: float(rows[f"{p}_ns"].mean()) if len(rows) else 0.0
            for p in (*CAUSES, *COPY_WORDS)}


def _mib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB" if n >= 2**20 \
        else f"{n / 2**10:.0f} KiB"


def _said(part: str, delta: float, rows: pd.DataFrame, base: pd.DataFrame) -> str:
    """One part's change in words: '+170.2 ms of device-to-host copies into pageable memory
    (256 MiB an iteration)', or for a part that shrank '0.728 ms less launch overhead'."""
    words = COPY_WORDS.get(part) or CAUSES[part]
    text = f"+{delta / 1e6:.3g} ms of {words}" if delta >= 0 else \
        f"{abs(delta) / 1e6:.3g} ms less {words}"
    col = _BYTES.get(part.split("_")[0])
    if part in COPY_PARTS and col and col in rows:
        moved = float(rows[col].mean()) - (float(base[col].mean()) if len(base) else 0.0)
        if moved >= 2**20:
            text += f" ({_mib(moved)} more an iteration)"
    return text


def cause(rows: pd.DataFrame, main: pd.DataFrame) -> str:
    """The budget part that makes iterations ``rows`` differ most from the main kind's
    ``main`` (by the means of each part), in words; '' when nothing differs."""
    if not len(rows) or not len(main):
        return ""
    a, b = _parts(main), _parts(rows)
    slower = float(rows["wall_ns"].mean()) >= float(main["wall_ns"].mean())
    grow = {p: b[p] - a[p] for p in a}
    part = max(grow, key=grow.get) if slower else min(grow, key=grow.get)
    if not abs(grow[part]) > 0:
        return ""
    text = _said(part, grow[part], rows, main)
    other = min(grow, key=grow.get) if slower else max(grow, key=grow.get)
    if abs(grow[other]) >= 0.3 * abs(grow[part]):  # much of it given back elsewhere
        text += ", offset by " + _said(other, grow[other], rows, main)
    return text


def trend_cause(main: pd.DataFrame) -> str:
    """The part that grows (or shrinks) most from the first quarter of the main kind's
    iterations to the last, in words."""
    q = max(len(main) // 4, 1)
    first, last = main.iloc[:q], main.iloc[-q:]
    return cause(last, first)


def explain(table: pd.DataFrame) -> pd.DataFrame:
    """The warm-up and outlier iterations of one GPU's budget ``table`` (with ``kind``): their
    wall time, how much slower than the main kind's median, and the part of the budget that
    grew most against the main kind (``why``)."""
    kind = table["kind"] if "kind" in table else pd.Series(MAIN, index=table.index)
    main = table[kind == MAIN]
    odd = table[kind.isin([WARM_UP, OUTLIER])]
    if odd.empty or main.empty:
        return pd.DataFrame(columns=["iteration", "phase", "wall_ns", "excess_ns", "why"])
    med = benchmath.median(main["wall_ns"])
    # the user's numbers where the ranges carry them (iter8 is iteration 8)
    nums = kinds.user_numbers(table["name"]) if "name" in table else None
    nums = nums[np.flatnonzero(kind.isin([WARM_UP, OUTLIER]).to_numpy())] if nums is not None \
        else None
    rows = []
    for i in range(len(odd)):
        r = odd.iloc[i:i + 1]
        excess = float(r["wall_ns"].iloc[0] - med)
        why = cause(r, main) or ("slower" if excess > 0 else "faster") + " than the main kind"
        rows.append({"iteration": int(nums[i]) if nums is not None else
                     int(r["iteration"].iloc[0]), "phase": str(kind[r.index[0]]),
                     "wall_ns": float(r["wall_ns"].iloc[0]), "excess_ns": excess, "why": why})
    return pd.DataFrame(rows)
