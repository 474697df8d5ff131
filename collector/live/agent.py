"""`whyjob agent`: the node-local collectors, run on every GPU node (a DaemonSet).

It follows the kernel log and the kubelet's container log files, polls the cloud's metadata
service for maintenance and spot notices about this node, and forwards everything to the
collector's receiver through an on-disk spool (forward.py), so nothing is lost while the
collector is away or the agent restarts.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TextIO

from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.live.forward import Forwarder
from whyjob.collector.live.health import Health, MetricsServer
from whyjob.collector.live.journal import JournalKernelLog
from whyjob.collector.live.logs import LogRetention
from whyjob.collector.live.metadata import AwsImds, AzureScheduledEvents, GceMetadata
from whyjob.collector.live.node import KernelLog, PodLogs
from whyjob.collector.live.poller import Poller
from whyjob.collector.live.runner import Collector

__all__ = ["RunningAgent", "node_name", "start_agent"]

_METADATA: dict[str, type[AwsImds | GceMetadata | AzureScheduledEvents]] = {
    "aws": AwsImds,
    "gce": GceMetadata,
    "azure": AzureScheduledEvents,
}


def node_name(configured: str | None) -> str:
    """The node this agent runs on: the config, else NODE_NAME (the downward API), else the
    host name."""
    return configured or os.environ.get("NODE_NAME") or socket.gethostname()


@dataclass
class RunningAgent:
    forwarder: Forwarder
    sources: list[Collector]
    metrics: MetricsServer | None
    stop_event: threading.Event
    health: Health

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        for source in self.sources:
            source.join(timeout)
        self.forwarder.join(timeout)
        if self.metrics is not None:
            self.metrics.stop()


def start_agent(
    settings: Mapping[str, Any],
    ingest: IngestOptions,
    *,
    metrics_listen: tuple[str, int] | None = None,
    log: TextIO = sys.stderr,
    metadata_base: str | None = None,
) -> RunningAgent:
    health = Health(on_error=lambda who, message: log.write(f"whyjob agent: {who}: {message}\n"))
    node = node_name(settings.get("node"))
    ingest = replace(ingest, node=node)
    forwarder = Forwarder(
        settings["spool"], settings["send_to"], health, token=settings.get("token")
    )
    checkpoints = forwarder.checkpoints()
    stop = threading.Event()
    retention = LogRetention(
        keep_all=settings["keep"] == "all",
        context_lines=settings["context_lines"],
        progress_every_s=settings["progress_every"],
    )
    sources: list[Collector] = []
    if settings["kernel"] == "journal":
        sources.append(
            JournalKernelLog(
                forwarder.put,
                health,
                node,
                ingest,
                checkpoints.get("kernel"),
                directory=settings["journal_dir"],
            )
        )
    elif settings["kernel"] not in (None, "off"):
        sources.append(
            KernelLog(
                forwarder.put,
                health,
                node,
                ingest,
                checkpoints.get("kernel"),
                path=Path(settings["kernel"]),
            )
        )
    if settings["pod_logs"] not in (None, "off"):
        sources.append(
            PodLogs(
                forwarder.put,
                health,
                ingest,
                checkpoints,
                retention,
                root=Path(settings["pod_logs"]),
            )
        )
    cloud = settings["cloud"]
    if cloud in _METADATA:
        kwargs: dict[str, Any] = {"base": metadata_base} if metadata_base else {}
        poll = _METADATA[cloud](node, ingest, **kwargs)
        sources.append(
            Poller(
                f"{cloud}-metadata",
                poll,
                settings["metadata_interval"],
                forwarder,
                health,
                checkpoints.get(f"{cloud}-metadata"),
            )
        )
    for source in sources:
        source.start(stop)
        log.write(
            f"whyjob agent: {getattr(source, 'name', type(source).__name__)}: started on {node}\n"
        )
    forwarder.start(stop)
    metrics = MetricsServer(health, *metrics_listen).start() if metrics_listen else None
    return RunningAgent(forwarder, sources, metrics, stop, health)
