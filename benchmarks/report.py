"""The results: rows, the terminal table, ``results.csv`` and ``results.png``.

Columns (CSV and table):

* ``median_s`` -- median of the timed runs (warm-up excluded); ``spread_s`` -- max - min of them;
* ``samples_per_s`` -- n / median_s;
* ``ratio_to_baseline`` -- baseline median / this median, where the baseline is HostTeam with one
  thread on the same kernel and n, in the same run (above 1 = faster than the baseline);
* ``bytes_moved`` -- bytes between driver and workers (Dask: inputs shipped + blocks and row
  partials returned, from the array sizes; MPI: bytes received in the allgathers, all ranks
  together; 0 in one process);
* ``peak_driver_mem_mb`` -- tracemalloc peak of the driver (MPI: rank 0) during one run;
* ``identical`` -- every output bit for bit equal to the one-process HostTeam result (yes/no), or
  n.a. where nothing ran.
"""
from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass

COLUMNS = ["kernel", "arm", "workers", "n", "repeats", "median_s", "spread_s", "samples_per_s",
           "ratio_to_baseline", "bytes_moved", "peak_driver_mem_mb", "identical", "note"]

BASELINE = "host_team"          # with workers == 1


@dataclass
class Row:
    kernel: str
    arm: str
    workers: int
    n: int
    repeats: int = 0
    median_s: float = math.nan
    spread_s: float = math.nan
    samples_per_s: float = math.nan
    ratio_to_baseline: float = math.nan
    bytes_moved: float = math.nan
    peak_driver_mem_mb: float = math.nan
    identical: str = "n.a."
    note: str = ""

    @property
    def ran(self) -> bool:
        return not math.isnan(self.median_s)


def skipped(kernel, arm, workers, n, reason) -> Row:
    return Row(kernel, arm, workers, n, note=f"skipped: {reason}")


def finish(rows: list[Row]) -> list[Row]:
    """Fill samples/s and the ratio to the same run's 1-thread HostTeam baseline."""
    base = {(r.kernel, r.n): r.median_s for r in rows if r.arm == BASELINE and r.workers == 1 and r.ran}
    for r in rows:
        if r.ran and r.median_s > 0 and r.n > 0:
            r.samples_per_s = r.n / r.median_s
            b = base.get((r.kernel, r.n))
            if b is not None:
                r.ratio_to_baseline = b / r.median_s
    return rows


def _fmt(v, kind):
    if isinstance(v, float) and math.isnan(v):
        return "-"
    if kind == "s":
        return f"{v:.3g}" if v < 100 else f"{v:.0f}"
    if kind == "rate":
        return f"{v:.3g}"
    if kind == "ratio":
        return f"{v:.3g}x"
    if kind == "bytes":
        v = float(v)
        for unit in ("B", "KB", "MB", "GB"):
            if v < 1024 or unit == "GB":
                return f"{v:.0f}{unit}" if unit == "B" else f"{v:.1f}{unit}"
            v /= 1024
    if kind == "mb":
        return f"{v:.1f}"
    return str(v)


_TABLE = [("kernel", None), ("arm", None), ("workers", None), ("n", None), ("median_s", "s"),
          ("spread_s", "s"), ("samples_per_s", "rate"), ("ratio_to_baseline", "ratio"),
          ("bytes_moved", "bytes"), ("peak_driver_mem_mb", "mb"), ("identical", None), ("note", None)]
_HEAD = {"samples_per_s": "samples/s", "ratio_to_baseline": "vs 1 thread", "bytes_moved": "moved",
         "peak_driver_mem_mb": "peak MB", "median_s": "median s", "spread_s": "spread s"}


def table(rows: list[Row], note_width: int = 70) -> str:
    """The rows as an aligned text table, with a legend."""
    cells = [[_HEAD.get(c, c) for c, _ in _TABLE]]
    for r in rows:
        line = []
        for c, kind in _TABLE:
            v = getattr(r, c)
            s = _fmt(v, kind) if kind else str(v)
            if c == "note" and len(s) > note_width:
                s = s[:note_width - 3] + "..."
            line.append(s)
        cells.append(line)
    widths = [max(len(c[k]) for c in cells) for k in range(len(_TABLE))]
    out = []
    for j, c in enumerate(cells):
        out.append("  ".join(s.ljust(w) if k in (0, 1, 10, 11) else s.rjust(w)
                             for k, (s, w) in enumerate(zip(c, widths))).rstrip())
        if j == 0:
            out.append("-" * len(out[0]))
    out.append("")
    out.append("median of the timed runs (warm-up excluded); spread = max - min; 'vs 1 thread' = "
               "1-thread HostTeam median / this median, same kernel and n; moved = driver<->workers "
               "(MPI: allgathered); peak MB = tracemalloc peak of the driver during one run; "
               "identical = bits equal to one-process HostTeam. Full notes in results.csv.")
    return "\n".join(out)


def write_csv(rows: list[Row], path: str) -> str:
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in rows:
            vals = []
            for c in COLUMNS:
                v = getattr(r, c)
                if isinstance(v, float):
                    v = "" if math.isnan(v) else (f"{v:.6g}" if c != "bytes_moved" else f"{v:.0f}")
                vals.append(v)
            w.writerow(vals)
    return path


def plot(rows: list[Row], path: str) -> str:
    """Time and samples/s against workers, one column per kernel (largest n), one line per arm."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    ran = [r for r in rows if r.ran and not r.arm.endswith(" job")]
    kernels = list(dict.fromkeys(r.kernel for r in ran))
    if not kernels:
        return "nothing ran: no plot"
    fig, axes = plt.subplots(2, len(kernels), figsize=(4.2 * len(kernels), 7), squeeze=False)
    for k, name in enumerate(kernels):
        mine = [r for r in ran if r.kernel == name]
        n = max(r.n for r in mine)
        mine = [r for r in mine if r.n == n]
        for arm in dict.fromkeys(r.arm for r in mine):
            pts = sorted((r.workers, r.median_s, r.samples_per_s) for r in mine if r.arm == arm)
            style = "o-" if len(pts) > 1 else "s"
            axes[0][k].plot([p[0] for p in pts], [p[1] for p in pts], style, label=arm)
            axes[1][k].plot([p[0] for p in pts], [p[2] for p in pts], style, label=arm)
        axes[0][k].set_title(f"{name}, n={n:.0e}")
        axes[0][k].set_ylabel("median time (s)")
        axes[1][k].set_ylabel("samples/s")
        ticks = sorted({r.workers for r in mine})
        for ax in (axes[0][k], axes[1][k]):
            ax.set_xticks(ticks)
            ax.set_yscale("log")
            ax.set_xlabel("threads / ranks / workers")
            ax.grid(True, which="both", alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_all(rows: list[Row], out_dir: str, footer: str = "") -> dict:
    os.makedirs(out_dir, exist_ok=True)
    csv_path = write_csv(rows, os.path.join(out_dir, "results.csv"))
    png = plot(rows, os.path.join(out_dir, "results.png"))
    with open(os.path.join(out_dir, "results.txt"), "w") as f:
        f.write(table(rows, note_width=10**6) + "\n" + (footer + "\n" if footer else ""))
    return {"csv": csv_path, "png": png}

