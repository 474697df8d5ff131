"""Every file of every scenario's bundle parses as the tool that writes it would have written it."""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from whyjob.sim import Truth

Bundle = Callable[..., tuple[Path, Truth]]
_TIME_KEYS = re.compile(r"(Timestamp|Time|At|timeAdded)$")


def _timestamps(node: Any, path: str = "") -> list[tuple[str, str]]:
    """Every timestamp-named string field in a Kubernetes object."""
    found: list[tuple[str, str]] = []
    if isinstance(node, dict):
        for key, value in node.items():
            where = f"{path}.{key}"
            if isinstance(value, str) and _TIME_KEYS.search(key):
                found.append((where, value))
            else:
                found += _timestamps(value, where)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found += _timestamps(value, f"{path}[{index}]")
    return found


def test_kubernetes_exports(bundle: Bundle, files: Any, case: tuple[str, int]) -> None:
    scenario, seed = case
    out, truth = bundle(scenario, seed)
    k8s = out / "k8s"
    events = files.events(out)
    modern = files.items(k8s / "events.k8s.io.json")
    nodes = files.items(k8s / "nodes.json")
    pods = files.pods_yaml(out)
    assert pods["kind"] == "List" and pods["metadata"] == {"resourceVersion": ""}
    assert "&id0" not in (k8s / "pods.yaml").read_text(), "kubectl never writes YAML anchors"
    assert events and nodes and pods["items"]
    for event in events:
        assert event["kind"] == "Event" and event["apiVersion"] == "v1"
        assert event["metadata"]["name"].startswith(event["involvedObject"]["name"] + ".")
        if event["eventTime"] is None:
            assert event["count"] >= 1 and event["firstTimestamp"] <= event["lastTimestamp"]
        else:
            assert event["firstTimestamp"] is None and event["source"] == {}
    for event in modern:
        assert (
            event["apiVersion"] == "events.k8s.io/v1" and "regarding" in event and "note" in event
        )
    objects = [*events, *modern, *nodes, *pods["items"]]
    for path in sorted(k8s.glob("*/*.json")):
        body = files.load(path)
        objects.append(body)
        namespace, name, uid, number = (
            path.stem.rsplit("_", 3) if path.parent.name == "pods" else (None, None, None, None)
        )
        if namespace is not None:
            assert body["metadata"]["namespace"] == namespace and body["metadata"]["uid"] == uid
            assert body["metadata"]["name"] == name and number is not None and number.isdigit()
    for body in objects:
        for where, value in _timestamps(body):
            assert files.RFC3339_Z.match(value), (scenario, where, value)
    for node in nodes:
        assert node["spec"]["providerID"].startswith(
            {"aws": "aws:///", "gce": "gce://", "azure": "azure:///"}[truth.cloud]
        )


def test_repeated_events_are_updates_of_one_object(bundle: Bundle, files: Any) -> None:
    for scenario in ("restart_loop", "unschedulable", "image_pull"):
        out, _truth = bundle(scenario, 1)
        versions: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for event in files.events(out):
            versions[event["metadata"]["uid"]].append(event)
        repeated = [v for v in versions.values() if len(v) > 1]
        assert repeated, scenario
        for chain in repeated:
            assert len({e["metadata"]["name"] for e in chain}) == 1
            counts = [e.get("count") or e.get("series", {}).get("count", 1) for e in chain]
            assert counts == sorted(counts) and counts[-1] > counts[0]
            versions_seen = [int(e["metadata"]["resourceVersion"]) for e in chain]
            assert versions_seen == sorted(versions_seen)


def test_logs_kernel_and_dcgm(bundle: Bundle, files: Any, case: tuple[str, int]) -> None:
    scenario, seed = case
    out, truth = bundle(scenario, seed)
    logs = sorted((out / "var/log/pods").glob("*/*/*.log"))
    started = [
        a
        for a in truth.attempts
        if a.category not in ("startup.image_pull", "startup.unschedulable", "startup.config")
    ]
    assert len(logs) >= len(started) > 0 or not started
    for path in logs:
        previous = ""
        partial = False
        for raw in path.read_text().splitlines():
            match = files.CRI_LINE.match(raw)
            assert match, (path, raw[:200])
            assert match.group(1) >= previous, path
            previous = match.group(1)
            partial = match.group(3) == "P"
            assert len(match.group(4).encode()) <= 16 * 1024
        assert not partial, f"{path} ends inside a partial line"
    kern = sorted((out / "nodes").glob("*/kern.log"))
    assert kern
    for path in kern:
        for raw in path.read_text().splitlines():
            if raw.startswith("-- Boot "):
                continue
            match = files.JOURNAL_LINE.match(raw)
            assert match and match.group(1) == path.parent.name, raw
        assert "NVRM: GPU at PCI:" in path.read_text() or "nvidia" not in path.read_text()
    scrapes = sorted((out / "dcgm").glob("*/*.prom"))
    assert scrapes
    for path in scrapes:
        text = path.read_text()
        assert text.startswith("# HELP DCGM_FI_") and path.stem.isdigit()
        for raw in text.splitlines():
            if raw.startswith("#"):
                assert raw.startswith(("# HELP ", "# TYPE "))
                continue
            match = files.PROM_SAMPLE.match(raw)
            assert match, raw
            assert f'Hostname="{path.parent.name}"' in match.group(2)
            assert abs(int(match.group(4)) // 1000 - int(path.stem)) <= 1


def test_cloud_exports(bundle: Bundle, files: Any, case: tuple[str, int]) -> None:
    scenario, seed = case
    out, truth = bundle(scenario, seed)
    present = {p.name for p in out.iterdir()}
    assert present >= {"truth.json", "k8s", "nodes", "dcgm"}
    clouds = {"aws", "gce", "azure"} & present
    assert clouds == {truth.cloud}
    if truth.cloud == "aws":
        activities = files.load(out / "aws/scaling-activities.json")["Activities"]
        for act in activities:
            assert set(act) >= {
                "ActivityId",
                "AutoScalingGroupName",
                "Description",
                "Cause",
                "StartTime",
                "StatusCode",
                "Progress",
                "Details",
            }
            json.loads(act["Details"])
            assert re.match(
                r"^(Launching a new|Terminating) EC2 instance: i-0[0-9a-f]{16}$", act["Description"]
            )
        statuses = files.load(out / "aws/instance-status.json")["InstanceStatuses"]
        assert statuses and all(re.match(r"^i-0[0-9a-f]{16}$", s["InstanceId"]) for s in statuses)
        for bridge in files.load(out / "aws/eventbridge.json"):
            assert set(bridge) == {
                "version",
                "id",
                "detail-type",
                "source",
                "account",
                "time",
                "region",
                "resources",
                "detail",
            }
            assert files.RFC3339_Z.match(bridge["time"])
    elif truth.cloud == "gce":
        for op in files.load(out / "gce/operations.json"):
            assert op["kind"] == "compute#operation" and op["status"] == "DONE"
            assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}-0[78]:00$", op["insertTime"])
            assert op["targetLink"].startswith("https://www.googleapis.com/compute/v1/projects/")
        for path in (out / "gce/upcoming-maintenance").glob("*.json"):
            files.load(path)
    else:
        for path in (out / "azure/scheduled-events").glob("*.json"):
            doc = files.load(path)
            assert set(doc) == {"DocumentIncarnation", "Events"}
            for event in doc["Events"]:
                assert event["NotBefore"] == "" or event["NotBefore"].endswith(" GMT")
                assert event["EventType"] in {
                    "Freeze",
                    "Reboot",
                    "Redeploy",
                    "Preempt",
                    "Terminate",
                }


def test_long_lines_are_split_into_partial_records() -> None:
    from whyjob.sim.clock import Clocks
    from whyjob.sim.crilog import MAX_LINE, render_log
    from whyjob.sim.incident import LogLine, Pod, Run, Slot

    pod = Pod("p", "ns", "uid", 0, Slot(0, 0), {}, {}, [], {}, "c", "img", "img@sha", "BestEffort")
    run = Run(pod, 0, "containerd://x", 0, log=[LogLine(5, "stdout", "x" * (MAX_LINE * 2 + 10))])
    lines = render_log(run, "node-a", Clocks("seed")).decode().splitlines()
    assert [line.split(" ", 3)[2] for line in lines] == ["P", "P", "F"]
    assert "".join(line.split(" ", 3)[3] for line in lines) == "x" * (MAX_LINE * 2 + 10)


def test_kubectl_json_is_go_marshal_indent(bundle: Bundle) -> None:
    """Sorted keys, four-space indent, `<>&` escaped: what json.MarshalIndent prints."""
    out, _truth = bundle("clean", 1)
    paths = [out / "k8s/events.json", out / "k8s/nodes.json"]
    paths += sorted((out / "k8s/pods").glob("*.json"))[:3]
    for path in paths:
        raw = path.read_text()
        expected = json.dumps(json.loads(raw), indent=4, sort_keys=True, ensure_ascii=False)
        expected = expected.replace("<", "\\u003c").replace(">", "\\u003e")
        assert raw == expected.replace("&", "\\u0026") + "\n", path.name
