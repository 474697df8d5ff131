"""`whyjob collect`: the configured collectors in one process, one writer, one metrics endpoint.

A collector that cannot start or that fails is reported (log line, `whyjob_collector_up 0`,
error counter) and retried by its own loop; it never stops the others.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TextIO

from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.live.config import CollectConfig
from whyjob.collector.live.health import Health, MetricsServer
from whyjob.collector.live.logs import LogRetention
from whyjob.collector.live.poller import Poller
from whyjob.collector.live.receiver import Receiver
from whyjob.collector.live.sink import Writer, checkpoint_key
from whyjob.core import telemetry
from whyjob.core.index import Index, open_index
from whyjob.core.index.probe import IndexProbe

if TYPE_CHECKING:
    from whyjob.core.index.elastic import ElasticSettings

__all__ = ["Collector", "Running", "start_collectors"]


class Collector(Protocol):
    name: str

    def start(self, stop: threading.Event) -> None: ...

    def join(self, timeout: float | None = None) -> None: ...


Builder = Callable[[Mapping[str, Any], Writer, Health, Mapping[str, str], IngestOptions], Collector]


def _kubernetes(
    settings: Mapping[str, Any],
    writer: Writer,
    health: Health,
    checkpoints: Mapping[str, str],
    ingest: IngestOptions,
) -> Collector:
    from whyjob.collector.live import kubernetes

    return kubernetes.KubernetesCollector(
        kubernetes.api_client_from(settings),
        writer,
        health,
        checkpoints,
        kubernetes.options_from(settings, ingest),
    )


def _asg(
    settings: Mapping[str, Any],
    writer: Writer,
    health: Health,
    checkpoints: Mapping[str, str],
    ingest: IngestOptions,
) -> Collector:
    from whyjob.collector.live.aws import AsgActivities, boto3_client

    poll = AsgActivities(boto3_client("autoscaling", settings), settings["groups"], ingest)
    return Poller("asg", poll, settings["interval"], writer, health, checkpoints.get("asg"))


def _ec2_status(
    settings: Mapping[str, Any],
    writer: Writer,
    health: Health,
    checkpoints: Mapping[str, str],
    ingest: IngestOptions,
) -> Collector:
    from whyjob.collector.live.aws import InstanceStatus, boto3_client

    poll = InstanceStatus(boto3_client("ec2", settings), settings["instances"], ingest)
    return Poller("ec2_status", poll, settings["interval"], writer, health)


def _dcgm(
    settings: Mapping[str, Any],
    writer: Writer,
    health: Health,
    checkpoints: Mapping[str, str],
    ingest: IngestOptions,
) -> Collector:
    from whyjob.collector.live.dcgm import DcgmScrape, PrometheusDcgm
    from whyjob.core.errors import ConfigError

    if settings["prometheus"] and settings["targets"]:
        raise ConfigError("collectors.dcgm: give `prometheus` or `targets`, not both")
    if settings["prometheus"]:
        poll: Any = PrometheusDcgm(
            settings["prometheus"], ingest, step_s=settings["step"], timeout_s=settings["timeout"]
        )
    elif settings["targets"]:
        poll = DcgmScrape(settings["targets"], ingest, timeout_s=settings["timeout"])
    else:
        raise ConfigError("collectors.dcgm needs `prometheus: URL` or `targets: [URL, ...]`")
    return Poller("dcgm", poll, settings["interval"], writer, health, checkpoints.get("dcgm"))


BUILDERS: dict[str, Builder] = {
    "kubernetes": _kubernetes,
    "asg": _asg,
    "ec2_status": _ec2_status,
    "dcgm": _dcgm,
}


@dataclass
class Running:
    """A started collecting process: stop it with `stop()`."""

    index: Index
    writer: Writer
    health: Health
    metrics: MetricsServer | None
    collectors: list[Collector]
    stop_event: threading.Event
    receiver: Receiver | None = None
    unobserve: Callable[[], None] = lambda: None  # stops the OTLP gauges of `health`

    def stop(self, timeout: float = 10.0) -> None:
        self.stop_event.set()
        if self.receiver is not None:
            self.receiver.stop()
        for collector in self.collectors:
            collector.join(timeout)
        self.writer.stop()
        if self.metrics is not None:
            self.metrics.stop()
        self.unobserve()
        self.index.close()


def start_collectors(
    config: CollectConfig,
    index_path: Path | ElasticSettings,
    ingest: IngestOptions,
    *,
    log: TextIO = sys.stderr,
    builders: Mapping[str, Builder] | None = None,
) -> Running:
    """Open the index, start the writer, the metrics endpoint and every configured collector."""
    # A collector runs for weeks: keep its page cache small and the file unmapped, so its
    # resident memory does not grow with the index (readers map it; they answer queries).
    index = open_index(index_path, readonly=False, cache_mib=16, mmap_mib=0)
    health = Health(on_error=lambda who, message: log.write(f"whyjob collect: {who}: {message}\n"))
    metrics = None
    if config.metrics_listen is not None:
        metrics = MetricsServer(
            health, *config.metrics_listen, probe=IndexProbe(index_path, writable=True)
        ).start()
    # This cluster's resume points only (another cluster's collector may share the index).
    scope = checkpoint_key("", ingest.cluster)
    checkpoints = {
        key[len(scope) :]: token
        for key, token in index.checkpoints(scope).items()
        if ingest.cluster or "|" not in key
    }
    if ingest.cluster:
        # Upgraded from a whyjob that kept resume points without the cluster, or `cluster:`
        # just set: go on from those rather than read every source again (its records would
        # come back under ids with the cluster in them, stored twice).
        for key, token in index.checkpoints("").items():
            if "|" not in key:
                checkpoints.setdefault(key, token)
    writer = Writer(index, health, cluster=ingest.cluster).start()
    unobserve = telemetry.observe(health.gauge_table)
    stop = threading.Event()
    started: list[Collector] = []
    for name, settings in config.collectors.items():
        try:
            collector = (builders or BUILDERS)[name](settings, writer, health, checkpoints, ingest)
            collector.start(stop)
        except Exception as exc:  # one collector that cannot start does not stop the others
            health.error(name, f"cannot start: {type(exc).__name__}: {exc}")
            continue
        started.append(collector)
        log.write(f"whyjob collect: {name}: started\n")
    receiver = None
    if config.receiver is not None:
        settings = config.receiver
        retention = LogRetention(
            keep_all=settings["keep"] == "all",
            context_lines=settings["context_lines"],
            progress_every_s=settings["progress_every"],
        )
        host, port = settings["listen"]
        receiver = Receiver(
            writer, health, ingest, retention, host=host, port=port, token=settings["token"]
        ).start()
        log.write(
            f"whyjob collect: receiver on http://{host}:{receiver.address[1]} (OTLP /v1/logs, agents /whyjob/v1/items)\n"
        )
    return Running(index, writer, health, metrics, started, stop, receiver, unobserve)
