"""aws-node-termination-handler, as it really writes: every interruption kind, in its text
(zerolog console) and JSON logs and as the Kubernetes events it emits, diagnosed from a paste.

The descriptions are the handler's own format strings (pkg/monitor/*/..., v1.25), the log
messages and fields those of pkg/logging/versioned.go, pkg/node/node.go and
pkg/interruptionevent/draincordon/handler.go, the event reasons those of
pkg/observability/k8s-events.go; `evicting pod NS/NAME` is kubectl's drain library.
"""

from __future__ import annotations

import json
from typing import NamedTuple

import pytest

from whyjob.cli.pasted import diagnose_text
from whyjob.collector.ingest.base import IngestOptions
from whyjob.explain.ruleset import load_rules

NODE = "ip-10-0-0-157.us-east-2.compute.internal"
INSTANCE = "i-0b662ef9931388ba0"
WHEN = "2024-05-01 11:59:58 +0000 UTC"


class Kind(NamedTuple):
    kind: str
    monitor: str
    event_id: str
    description: str
    reason: str  # the Kubernetes event reason
    category: str


KINDS = [
    Kind(
        "SPOT_ITN", "SQS_MONITOR", "spot-itn-event-3165",
        f"Spot Interruption notice for instance {INSTANCE} was sent at {WHEN} \n",
        "SpotInterruption", "node.spot_interruption",
    ),
    Kind(
        "SPOT_ITN", "SPOT_ITN_MONITOR", "spot-itn-9f2c",
        "Spot ITN received. Instance will be interrupted at 2024-05-01T12:01:58Z \n",
        "SpotInterruption", "node.spot_interruption",
    ),
    Kind(
        "SCHEDULED_EVENT", "SCHEDULED_EVENT_MONITOR", "instance-event-0d59937288b749b32",
        "system-reboot will occur between 21 Jan 2019 09:00:43 GMT and 21 Jan 2019 09:17:23 GMT"
        " because scheduled reboot\n",
        "ScheduledEvent", "node.maintenance",
    ),
    Kind(
        "SCHEDULED_EVENT", "SQS_MONITOR", "aws-health-scheduled-change-event-6162",
        f"AWS Health scheduled change event received. Instance {INSTANCE} will be interrupted"
        f" at {WHEN} \n",
        "ScheduledEvent", "node.maintenance",
    ),
    Kind(
        "ASG_LIFECYCLE", "SQS_MONITOR", "asg-lifecycle-term-3831",
        f"ASG Lifecycle Termination event received. Instance will be interrupted at {WHEN} \n",
        "ASGLifecycle", "node.scale_in",
    ),
    Kind(
        "ASG_LIFECYCLE", "ASG_LIFECYCLE_MONITOR", "target-lifecycle-state-terminated-ab",
        "AST target lifecycle state received. Instance will be terminated\n",  # sic
        "ASGLifecycle", "node.scale_in",
    ),
    Kind(
        "REBALANCE_RECOMMENDATION", "SQS_MONITOR", "rebalance-recommendation-event-31",
        f"Rebalance recommendation event received. Instance {INSTANCE} will be cordoned at"
        f" {WHEN} \n",
        "RebalanceRecommendation", "node.spot_interruption",
    ),
]  # fmt: skip
IDS = [f"{k.kind}-{k.monitor}" for k in KINDS]


def _event(k: Kind) -> dict[str, object]:
    return {
        "AutoScalingGroupName": "gpu-asg", "Description": k.description,
        "EndTime": "0001-01-01T00:00:00Z", "EventID": k.event_id, "InProgress": False,
        "InstanceID": INSTANCE, "InstanceType": "p4d.24xlarge", "IsManaged": True,
        "Kind": k.kind, "Monitor": k.monitor, "NodeLabels": None, "NodeName": NODE,
        "NodeProcessed": False, "Pods": None, "ProviderID": f"aws:///us-east-1b/{INSTANCE}",
        "StartTime": "2024-05-01T11:59:58Z", "State": "",
    }  # fmt: skip


def text_log(k: Kind) -> str:
    event = json.dumps(_event(k), sort_keys=True, separators=(",", ":"))
    return (
        f"2024/05/01 12:00:00 INF Adding new event to the event store event={event}\n"
        f"2024/05/01 12:00:01 INF Requesting instance drain event-id={k.event_id} "
        f"instance-id={INSTANCE} kind={k.kind} node-name={NODE} provider-id=aws:///us-east-1b/{INSTANCE}\n"
        f'2024/05/01 12:00:01 INF Pods on node node_name={NODE} pod_names=["llama-ft-worker-3","aws-node-8xk2p"]\n'
        f"2024/05/01 12:00:01 INF Draining the node node_name={NODE}\n"
        "2024/05/01 12:00:01 INF evicting pod ml-research/llama-ft-worker-3\n"
        f"2024/05/01 12:00:40 INF Node successfully cordoned and drained node_name={NODE} "
        f"reason={json.dumps(k.description)}\n"
    )


def json_log(k: Kind) -> str:
    lines = [
        {"level": "info", "event": _event(k), "time": "2024-05-01T12:00:00Z",
         "message": "Adding new event to the event store"},
        {"level": "info", "event-id": k.event_id, "kind": k.kind, "monitor": k.monitor,
         "node-name": NODE, "instance-id": INSTANCE, "provider-id": "",
         "time": "2024-05-01T12:00:01Z", "message": "Requesting instance drain"},
        {"level": "info", "node_name": NODE, "reason": k.description,
         "time": "2024-05-01T12:00:40Z", "message": "Node successfully cordoned and drained"},
    ]  # fmt: skip
    return "\n".join(json.dumps(line) for line in lines) + "\n"


def events_table(k: Kind) -> str:
    said = k.description.strip()
    return (
        f"$ kubectl get events -A --field-selector involvedObject.name={NODE}\n"
        "NAMESPACE     LAST SEEN   TYPE     REASON          OBJECT          MESSAGE\n"
        f"default       12m         Normal   {k.reason}   node/{NODE}   {said}\n"
        f"default       12m         Normal   CordonAndDrain   node/{NODE}   Node successfully cordoned and drained\n"
        f"ml-research   12m         Normal   PodEviction   pod/llama-ft-worker-3   Pod evicted due to node drain (node {NODE})\n"
    )


@pytest.mark.parametrize("form", [text_log, json_log, events_table])
@pytest.mark.parametrize("k", KINDS, ids=IDS)
def test_every_kind_in_every_form_names_its_cause(k: Kind, form: object) -> None:
    paste = form(k)  # type: ignore[operator]
    found = diagnose_text(paste, load_rules([]), IngestOptions(at=1_780_000_000_000))
    assert found.category == k.category, (found.category, found.summary)


def test_a_drain_with_the_pods_eviction_is_likely_and_the_handler_is_quoted() -> None:
    spot = KINDS[0]
    found = diagnose_text(text_log(spot), load_rules([]), IngestOptions(at=1_780_000_000_000))
    assert (found.category, found.grade) == ("node.spot_interruption", "likely")
    quoted = [e["text"] for e in found.evidence]
    assert any(m.startswith("Adding new event to the event store (SPOT_ITN") for m in quoted)
    assert not any("{" in m for m in quoted)  # the stored event is summarised, not dumped


def test_a_launch_lifecycle_event_is_not_a_scale_in() -> None:
    # Launch events share the `asg-lifecycle-term-` id prefix (sic) and drain nothing.
    line = (
        "2024/05/01 12:00:01 INF Waiting for node to be ready before completing ASG launch "
        f"lifecycle event-id=asg-lifecycle-term-5a1 instance-id={INSTANCE} "
        f"kind=ASG_LAUNCH_LIFECYCLE node-name={NODE} provider-id=aws:///us-east-1b/{INSTANCE}\n"
    )
    found = diagnose_text(line, load_rules([]), IngestOptions(at=1_780_000_000_000))
    assert found.category != "node.scale_in", found.summary
