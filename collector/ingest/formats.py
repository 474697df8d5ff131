"""The import formats whyjob reads, and how a file is recognised as one of them.

Detection looks at content, not file names: JSON documents are routed by their shape (a
Kubernetes List, `{"Activities": ...}`, an EventBridge envelope, ...), text files by their
first lines. The kubelet log path is the one name that matters, because it names the pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from whyjob.collector.ingest import aws, azure, dcgm, gce, k8s_audit, kernel, kubectl_text, podlogs
from whyjob.collector.ingest.base import Context, Item, Rejected, guarded
from whyjob.collector.ingest.k8s_events import parse_event
from whyjob.collector.ingest.k8s_objects import parse_node, parse_pod

__all__ = [
    "FORMAT_NAMES",
    "JSON_FORMATS",
    "TEXT_FORMATS",
    "JsonFormat",
    "TextFormat",
    "parse_k8s",
    "parse_k8s_object",
]

Lines = Iterable[tuple[int, str]]


@dataclass(frozen=True, slots=True)
class JsonFormat:
    """A JSON (or YAML) document format, parsed one document at a time."""

    name: str
    description: str
    matches: Callable[[Any], bool]
    parse: Callable[[Context, Any, int | None], Iterator[Item]]


@dataclass(frozen=True, slots=True)
class TextFormat:
    """A line-oriented format, parsed one whole file at a time."""

    name: str
    description: str
    matches: Callable[[list[str]], bool]
    parse: Callable[[Context, Lines], Iterator[Item]]


_K8S_PARSERS: dict[str, Callable[[Context, Any, int | None], Iterator[Item]]] = {
    "Event": parse_event,
    "Pod": parse_pod,
    "Node": parse_node,
}


def _is_k8s(doc: Any) -> bool:
    """A Kubernetes object (apiVersion and kind) or a List of them, even one cut short."""
    if not isinstance(doc, dict):
        return False
    kind, items = doc.get("kind"), doc.get("items")
    if isinstance(kind, str) and "apiVersion" in doc:
        return True
    if isinstance(kind, str) and kind.endswith("List") and isinstance(items, list):
        return True
    # A List cut short loses its trailing `kind`; its items still say what they are.
    return (
        kind is None
        and isinstance(items, list)
        and bool(items)
        and isinstance(items[0], dict)
        and "apiVersion" in items[0]
        and "kind" in items[0]
    )


def parse_k8s(ctx: Context, doc: Any, line: int | None) -> Iterator[Item]:
    """A Kubernetes object or List; objects of kinds whyjob does not read are counted."""
    kind = doc.get("kind") or "List"
    items = doc.get("items")
    if not (kind.endswith("List") and isinstance(items, list)):
        yield from parse_k8s_object(ctx, doc, kind, line)
        return
    implied = kind[: -len("List")] if kind != "List" else ""
    for item in items:
        if not isinstance(item, dict):
            yield Rejected(line, "List item is not an object")
            continue
        kind = item.get("kind") or implied
        yield from guarded(
            parse_k8s_object(ctx, item, kind if isinstance(kind, str) else "?", line),
            line,
            item,
        )


def parse_k8s_object(ctx: Context, item: Any, kind: str, line: int | None) -> Iterator[Item]:
    if kind == "Event" and k8s_audit.is_audit_event(item):
        yield from k8s_audit.parse_audit_event(ctx, item, line)
        return
    parser = _K8S_PARSERS.get(kind)
    if parser is None:
        ctx.skipped[kind or "?"] = ctx.skipped.get(kind or "?", 0) + 1
        return
    yield from parser(ctx, item, line)


JSON_FORMATS: tuple[JsonFormat, ...] = (
    JsonFormat(
        "k8s",
        "kubectl get events|pods|nodes -o json|yaml, API server audit events",
        _is_k8s,
        parse_k8s,
    ),
    JsonFormat(
        "aws.asg-activities",
        "aws autoscaling describe-scaling-activities",
        aws.looks_like_scaling_activities,
        aws.parse_scaling_activities,
    ),
    JsonFormat(
        "aws.instance-status",
        "aws ec2 describe-instance-status",
        aws.looks_like_instance_status,
        aws.parse_instance_status,
    ),
    JsonFormat(
        "aws.eventbridge", "EventBridge events", aws.looks_like_eventbridge, aws.parse_eventbridge
    ),
    JsonFormat(
        "aws.imds-spot", "IMDS spot/instance-action", aws.looks_like_imds_spot, aws.parse_imds_spot
    ),
    JsonFormat(
        "aws.imds-maintenance",
        "IMDS events/maintenance/scheduled",
        aws.looks_like_imds_scheduled,
        aws.parse_imds_scheduled,
    ),
    JsonFormat(
        "gce.operations",
        "gcloud compute operations list --format=json",
        gce.looks_like_operations,
        gce.parse_operations,
    ),
    JsonFormat(
        "gce.upcoming-maintenance",
        "GCE metadata instance/upcoming-maintenance",
        gce.looks_like_upcoming_maintenance,
        gce.parse_upcoming_maintenance,
    ),
    JsonFormat(
        "azure.scheduled-events",
        "Azure IMDS Scheduled Events",
        azure.looks_like_scheduled_events,
        azure.parse_scheduled_events,
    ),
    JsonFormat(
        "prometheus.api",
        "Prometheus HTTP API query result (dcgm-exporter series)",
        dcgm.looks_like_prometheus_api,
        dcgm.parse_prometheus_api,
    ),
    JsonFormat(
        "kernel.journal-json",
        "journalctl -k -o json",
        kernel.looks_like_journal_json,
        kernel.parse_journal_json,
    ),
)

TEXT_FORMATS: tuple[TextFormat, ...] = (
    TextFormat(
        "log.cri", "kubelet container log (CRI)", podlogs.looks_like_cri, podlogs.parse_cri_text
    ),
    TextFormat(
        "dcgm.prometheus",
        "dcgm-exporter scrape (Prometheus text)",
        dcgm.looks_like_prometheus_text,
        dcgm.parse_prometheus_text,
    ),
    TextFormat(
        "kubectl.describe",
        "kubectl describe pod",
        kubectl_text.looks_like_describe_pod,
        kubectl_text.parse_describe_pod,
    ),
    TextFormat(
        "kubectl.events-table",
        "kubectl get events (table)",
        kubectl_text.looks_like_events_table,
        kubectl_text.parse_events_table,
    ),
    TextFormat(
        "kubectl.pods-table",
        "kubectl get pods (table)",
        kubectl_text.looks_like_pods_table,
        kubectl_text.parse_pods_table,
    ),
    TextFormat(
        "controller.log",
        "aws-node-termination-handler, cluster-autoscaler or Karpenter logs",
        kubectl_text.looks_like_controller_log,
        kubectl_text.parse_controller_log,
    ),
    TextFormat(
        "kernel",
        "dmesg / journalctl -k / kern.log",
        kernel.looks_like_kernel_text,
        kernel.parse_kernel_text,
    ),
)

# A plain log is recognised only when attached with --pod; it is not in the sniffing list.
PLAIN_LOG = TextFormat(
    "log.plain", "plain log file (--pod)", lambda _: True, podlogs.parse_plain_text
)
DOCKER_LOG = "log.docker-json"

FORMAT_NAMES: tuple[str, ...] = (
    *(f.name for f in JSON_FORMATS),
    *(f.name for f in TEXT_FORMATS),
    PLAIN_LOG.name,
    DOCKER_LOG,
)
