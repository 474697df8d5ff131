"""Maintenance ahead, end to end, in all three clouds: a notice for a running rank's host warns
once per experiment and notice, in Slack (through slack_sdk to the Slack stand-in) and in a real
Alertmanager, before the window opens, and clears after it.

Two ways in: the simulator's `maintenance_ahead` bundle through the real readers, and the live
metadata collectors (IMDS, GCE metadata, Azure Scheduled Events) polling stand-ins that speak
those services' protocols."""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from datetime import UTC, datetime
from email.utils import format_datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from slack_sdk import WebClient

from tests.standins.metadata import MetadataService
from tests.standins.services import alertmanager
from tests.standins.slack import SlackStandin
from whyjob.api.alerts import AlertmanagerSink
from whyjob.api.risk import RiskWatch
from whyjob.api.slack import MemoryThreadStore
from whyjob.api.slackwire import SlackRiskSink
from whyjob.collector.ingest.base import IngestOptions
from whyjob.collector.ingest.run import Ingestor
from whyjob.collector.live.metadata import AwsImds, AzureScheduledEvents, GceMetadata
from whyjob.core.entities import Binding, PodRecord
from whyjob.core.evidence import Evidence, evidence_id
from whyjob.core.index import SqliteIndex
from whyjob.core.timeutil import parse_ts
from whyjob.explain.engine import explain_experiment
from whyjob.explain.ruleset import load_rules
from whyjob.sim import simulate

MINUTE, HOUR = 60_000, 3_600_000
# Seeds of the scenario whose world is in each cloud (the simulator picks the cloud by seed).
SEEDS = {"aws": 3, "gce": 8, "azure": 1}


def _active(url: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"active": "true", "silenced": "false", "inhibited": "false"})
    with urllib.request.urlopen(f"{url}/api/v2/alerts?{query}") as response:
        alerts: list[dict[str, Any]] = orjson.loads(response.read())
    return [a for a in alerts if a["labels"].get("alertname") == "WhyjobExperimentAtRisk"]


@pytest.mark.parametrize("cloud", sorted(SEEDS))
def test_the_simulated_notice_warns_before_the_window_and_clears_after(
    cloud: str, tmp_path: Path
) -> None:
    truth = simulate("maintenance_ahead", SEEDS[cloud], tmp_path / "bundle")
    assert truth.cloud == cloud
    (ahead,) = truth.ahead
    captured, starts = parse_ts(truth.captured_at), parse_ts(str(ahead["starts"]))
    ends = parse_ts(str(ahead["ends"])) if ahead["ends"] else None
    assert captured < starts < captured + HOUR
    rules = load_rules()
    with SqliteIndex(tmp_path / "index.sqlite") as index:
        Ingestor(index, IngestOptions()).ingest([str(tmp_path / "bundle")])
        name, namespace = truth.experiment_name, truth.experiment_namespace

        def at(moment: int) -> list[Any]:
            return [explain_experiment(index, rules, name, namespace, now=moment)]

        (explanation,) = at(captured)
        assert explanation.verdict.outcome == "running"
        (risk,) = explanation.at_risk
        assert risk.node == ahead["node"]
        assert abs(risk.starts - starts) < 10_000  # the cloud's clock may differ by seconds
        assert risk.gpu_hours > 0 and len(risk.ranks) == 1
        with alertmanager(tmp_path) as am, SlackStandin() as slack:
            client = WebClient(token=slack.token, base_url=slack.url + "/api/")
            watch = RiskWatch(
                [AlertmanagerSink(am), SlackRiskSink(client, MemoryThreadStore(), [], "#ml-alerts", lambda uid: {})],
                url_for=lambda ns, n: f"https://whyjob.example/experiments/{ns}/{n}",
            )  # fmt: skip
            warned = f"warned {namespace}/{name} on {ahead['node']}"
            assert watch.check(at(captured)) == [warned]
            (alert,) = _active(am)
            assert alert["labels"]["node"] == ahead["node"]
            assert alert["labels"]["experiment"] == name
            assert abs(parse_ts(alert["annotations"]["window_start"]) - starts) < 10_000
            assert float(alert["annotations"]["gpu_hours_at_risk"]) > 0
            # Ten minutes on, and once the window has opened: still the one warning.
            assert watch.check(at(captured + 10 * MINUTE)) == []
            assert watch.check(at(starts + MINUTE)) == []
            assert len(_active(am)) == 1
            over = (ends if ends is not None else starts + 2 * HOUR) + MINUTE
            assert watch.check(at(over)) == [f"cleared {namespace}/{name} on {ahead['node']}"]
            assert _active(am) == []
            posted = slack.posts("#ml-alerts")
        warning, cleared = posted
        assert warning["text"].startswith(":warning: *At risk*:")
        assert ahead["node"] in warning["text"] and "GPU-hours" in warning["text"]
        assert cleared["thread_ts"] == warning["ts"]


def _running(index: SqliteIndex, node: str, now: int) -> None:
    """A two-rank job, three hours in, rank 0 on `node`."""
    for n, where in enumerate((node, f"{node}-peer")):
        uid = f"uid-{n}"
        index.upsert_pods(
            [PodRecord(uid, "ml", f"llama-ft-worker-{n}", seen=now - MINUTE, experiment="llama-ft",
                       launcher="PyTorchJob", rank=f"worker-{n}", node=where,
                       created=now - 3 * HOUR, phase="Running", gpus=8)]
        )  # fmt: skip
        index.bind([Binding("pod.node", uid, where, now - 3 * HOUR, now)])
        index.write(
            [Evidence(evidence_id("k8s.pod", uid, "running"), now - 3 * HOUR, "k8s.pod",
                      "container.running", "Container pytorch running", namespace="ml",
                      pod=f"llama-ft-worker-{n}", pod_uid=uid, container="pytorch", node=where,
                      attrs={"restart": 0})]
        )  # fmt: skip


def _rfc1123(ms: int) -> str:
    return format_datetime(datetime.fromtimestamp(ms / 1000, UTC), usegmt=True)


def _imds_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%d %b %Y %H:%M:%S GMT")


def _rfc3339(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _serve(server: MetadataService, cloud: str, starts: int) -> Any:
    """The metadata service announces a window opening at `starts`; the collector's poller."""
    if cloud == "aws":
        server.documents["/latest/meta-data/instance-id"] = b"i-0a1b2c3d4e5f60718"
        server.documents["/latest/meta-data/events/maintenance/scheduled"] = orjson.dumps(
            [{"NotBefore": _imds_time(starts), "Code": "system-reboot",
              "Description": "scheduled reboot", "EventId": "instance-event-0d59937288b749b32",
              "NotAfter": _imds_time(starts + 2 * HOUR), "State": "active"}]
        )  # fmt: skip
        return AwsImds("gpu-node-aws", base=server.url)
    if cloud == "gce":
        base = "/computeMetadata/v1/instance/"
        server.documents[base + "maintenance-event"] = b"NONE"
        server.documents[base + "preempted"] = b"FALSE"
        server.documents[base + "upcoming-maintenance"] = orjson.dumps(
            {"can_reschedule": "true", "latest_window_start_time": _rfc3339(starts),
             "maintenance_reasons": ["PLANNED_UPDATE"], "maintenance_status": "PENDING",
             "type": "SCHEDULED", "window_end_time": _rfc3339(starts + 2 * HOUR),
             "window_start_time": _rfc3339(starts)}
        )  # fmt: skip
        return GceMetadata("gpu-node-gce", base=server.url)
    server.documents["/metadata/scheduledevents?api-version=2020-07-01"] = orjson.dumps(
        {"DocumentIncarnation": 3,
         "Events": [{"EventId": "C7061BAC-AFDC-4513-B24B-AA5F13A16123", "EventStatus": "Scheduled",
                     "EventType": "Reboot", "ResourceType": "VirtualMachine",
                     "Resources": ["aks-gpupool-12345678-vmss_3"], "NotBefore": _rfc1123(starts),
                     "Description": "Host server is undergoing maintenance.",
                     "EventSource": "Platform", "DurationInSeconds": 9}]}
    )  # fmt: skip
    return AzureScheduledEvents("aks-gpupool-12345678-vmss000003", base=server.url)


@pytest.mark.parametrize("cloud", sorted(SEEDS))
def test_a_notice_polled_live_from_the_metadata_service_warns_the_running_job(
    cloud: str, index: SqliteIndex, tmp_path: Path
) -> None:
    now = int(time.time()) * 1000
    starts = now + 40 * MINUTE
    with MetadataService(cloud) as server:
        poll = _serve(server, cloud, starts)
        node = {"aws": "gpu-node-aws", "gce": "gpu-node-gce"}.get(
            cloud, "aks-gpupool-12345678-vmss000003"
        )
        _running(index, node, now)
        items = poll(None).items
    index.write(item for item in items if isinstance(item, Evidence))
    explanation = explain_experiment(index, load_rules(), "llama-ft", "ml", now=now)
    (risk,) = explanation.at_risk
    assert (risk.node, risk.ranks, risk.starts) == (node, ["worker-0"], starts)
    with alertmanager(tmp_path) as am:
        watch = RiskWatch([AlertmanagerSink(am)], url_for=lambda ns, n: f"https://w.example/{n}")
        assert watch.check([explanation]) == [f"warned ml/llama-ft on {node}"]
        (alert,) = _active(am)
        assert alert["annotations"]["window_start"] == _rfc3339(starts)
        assert alert["labels"]["reason"] == "notice.maintenance"
