"""Fleet analytics with pandas, for `whyjob report`: where the GPU-hours went, week by week.

pandas is imported here only, and this module only by `whyjob report`: explain, the API and
every other command stay free of it (tests/cli/test_fleet.py checks `whyjob explain`).

Tables (tidy: one row per observation, so the CSV and Parquet files load as they are):
- `lost_by_cause_week`: GPU-hours lost and runs failed first, per ISO week and cause
- `lost_by_namespace_week`: the same per namespace
- `restart_loops`: experiments in a restart loop, how many runs, for how long they burned
- `mtbf_by_pool`, `mtbf_by_instance_type`: node-hours observed (pods running on the node) per
  failure the infrastructure owns (a run ended by a node, GPU, network, storage or cloud cause)
- `top_nodes`, `top_gpus`: the fleet's most harmful, as `whyjob nodes` and `whyjob gpus` rank
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Final

import pandas as pd

from whyjob.explain.fleet import pool_and_type
from whyjob.explain.fleetmodel import Fleet

__all__ = ["Report", "build_report"]

_HOUR_MS: Final = 3_600_000
_INFRA: Final = frozenset({"infra", "platform"})


class Report(Mapping[str, pd.DataFrame]):
    """The report's tables by name, in the order they are printed."""

    def __init__(self, tables: dict[str, pd.DataFrame]) -> None:
        self._tables = tables

    def __getitem__(self, name: str) -> pd.DataFrame:
        return self._tables[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._tables)

    def __len__(self) -> int:
        return len(self._tables)

    def text(self, name: str, columns: int = 6) -> str:
        """A table as text; the weekly ones turned wide (a row per week, a column per cause or
        namespace, the biggest first and the rest as `other`), which reads better than tidy."""
        frame = self._tables[name]
        if frame.empty:
            return "  (none)"
        if not name.endswith("_week"):
            return frame.to_string(index=False)
        key = "cause" if "cause" in frame.columns else "namespace"
        wide = frame.pivot_table(
            index="week", columns=key, values="gpu_hours_lost", aggfunc="sum", fill_value=0.0
        )
        order = wide.sum().sort_values(ascending=False).index
        shown = wide[order[:columns]]
        if len(order) > columns:
            shown = shown.assign(other=wide[order[columns:]].sum(axis=1))
        return shown.round(1).to_string()

    def write(self, folder: Path) -> list[Path]:
        """Each table as `NAME.csv` and `NAME.parquet` in `folder`."""
        folder.mkdir(parents=True, exist_ok=True)
        written = []
        for name, frame in self._tables.items():
            frame.to_csv(folder / f"{name}.csv", index=False)
            frame.to_parquet(folder / f"{name}.parquet", index=False)
            written += [folder / f"{name}.csv", folder / f"{name}.parquet"]
        return written


def _week(ms: pd.Series) -> pd.Series:
    """The Monday (UTC) starting each time's ISO week, as a date."""
    day = pd.to_datetime(ms, unit="ms", utc=True).dt.normalize()
    return (day - pd.to_timedelta(day.dt.day_of_week, unit="D")).dt.date


def build_report(
    fleet: Fleet,
    node_spans: Mapping[str, tuple[int, int]],
    labels: Mapping[str, Mapping[str, str]],
) -> Report:
    """The report of a fleet; `node_spans` is each node's first and last sighting of a pod in
    the window (for MTBF) and `labels` its labels (for its pool and instance type)."""
    runs = pd.DataFrame(
        [
            {
                "namespace": r.namespace,
                "experiment": r.experiment,
                "node": r.node,
                "cause": r.category,
                "owner": r.owner,
                "ended_at": r.ended_at,
                "gpu_hours_lost": r.gpu_hours_lost,
            }
            for r in fleet.runs
        ],
        columns=[
            "namespace",
            "experiment",
            "node",
            "cause",
            "owner",
            "ended_at",
            "gpu_hours_lost",
        ],
    )
    runs["week"] = _week(runs["ended_at"])
    tables = {
        "lost_by_cause_week": _lost_by(runs, "cause"),
        "lost_by_namespace_week": _lost_by(runs, "namespace"),
        "restart_loops": _loops(fleet),
        "mtbf_by_pool": _mtbf(runs, node_spans, labels, "pool"),
        "mtbf_by_instance_type": _mtbf(runs, node_spans, labels, "instance_type"),
        "top_nodes": _top_nodes(fleet),
        "top_gpus": _top_gpus(fleet),
    }
    return Report(tables)


def _lost_by(runs: pd.DataFrame, column: str) -> pd.DataFrame:
    grouped = (
        runs.groupby(["week", column], as_index=False)
        .agg(runs=("gpu_hours_lost", "size"), gpu_hours_lost=("gpu_hours_lost", "sum"))
        .sort_values(["week", "gpu_hours_lost"], ascending=[True, False])
    )
    grouped["gpu_hours_lost"] = grouped["gpu_hours_lost"].round(1)
    return grouped.reset_index(drop=True)


def _loops(fleet: Fleet) -> pd.DataFrame:
    rows = [
        {
            "namespace": e.namespace,
            "experiment": e.name,
            "kind": e.loop_kind,
            "failed_runs": e.failed_runs,
            "burned_hours": round(max(0, e.loop_window_s or 0) / 3600, 1),
            "gpu_hours_lost": round(e.gpu_hours_lost, 1),
            "progress": e.progress,
            "outcome": e.outcome,
        }
        for e in fleet.experiments
        if e.looping
    ]
    columns = [
        "namespace",
        "experiment",
        "kind",
        "failed_runs",
        "burned_hours",
        "gpu_hours_lost",
        "progress",
        "outcome",
    ]
    frame = pd.DataFrame(rows, columns=columns)
    return frame.sort_values("gpu_hours_lost", ascending=False).reset_index(drop=True)


def _mtbf(
    runs: pd.DataFrame,
    spans: Mapping[str, tuple[int, int]],
    labels: Mapping[str, Mapping[str, str]],
    by: str,
) -> pd.DataFrame:
    which = 0 if by == "pool" else 1
    nodes = pd.DataFrame(
        [
            {
                "node": node,
                by: pool_and_type(labels.get(node) or {})[which] or "(unlabelled)",
                "node_hours": (last - first) / _HOUR_MS,
            }
            for node, (first, last) in spans.items()
        ],
        columns=["node", by, "node_hours"],
    )
    failures = runs[runs["owner"].isin(_INFRA)].groupby("node").size().rename("failures")
    merged = nodes.merge(failures, how="left", left_on="node", right_index=True)
    merged["failures"] = merged["failures"].fillna(0).astype(int)
    table = merged.groupby(by, as_index=False).agg(
        nodes=("node", "size"), node_hours=("node_hours", "sum"), failures=("failures", "sum")
    )
    table["mtbf_hours"] = (
        table["node_hours"] / table["failures"].where(table["failures"] > 0)
    ).round(1)
    table["node_hours"] = table["node_hours"].round(1)
    return table.sort_values("mtbf_hours", na_position="last").reset_index(drop=True)


def _top_nodes(fleet: Fleet, limit: int = 20) -> pd.DataFrame:
    columns = [
        "node",
        "pool",
        "instance_type",
        "runs",
        "hardware_runs",
        "gpu_hours_lost",
        "xids",
        "not_ready",
        "lemon",
    ]
    return pd.DataFrame(
        [
            {
                "node": n.node,
                "pool": n.pool,
                "instance_type": n.instance_type,
                "runs": n.runs,
                "hardware_runs": n.hardware_runs,
                "gpu_hours_lost": round(n.gpu_hours_lost, 1),
                "xids": ", ".join(f"{k} x{v}" for k, v in sorted(n.xids.items())),
                "not_ready": n.not_ready,
                "lemon": n.lemon,
            }
            for n in fleet.nodes[:limit]
        ],
        columns=columns,
    )


def _top_gpus(fleet: Fleet, limit: int = 20) -> pd.DataFrame:
    columns = ["gpu", "node", "runs", "faults", "xids", "gpu_hours_lost", "repeats"]
    return pd.DataFrame(
        [
            {
                "gpu": g.gpu,
                "node": g.node,
                "runs": g.runs,
                "faults": g.faults,
                "xids": ", ".join(f"{k} x{v}" for k, v in sorted(g.xids.items())),
                "gpu_hours_lost": round(g.gpu_hours_lost, 1),
                "repeats": ", ".join(str(x) for x in g.repeats),
            }
            for g in fleet.gpus[:limit]
        ],
        columns=columns,
    )
