"""Warnings before the fall: fired once per experiment and notice, resolved when the notice no
longer holds, seen in a real Alertmanager and on a webhook."""

from __future__ import annotations

import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import orjson

from tests.api.test_alerts import Webhook
from tests.explain.test_at_risk import NOW, _maintenance, _running
from tests.standins.services import alertmanager
from whyjob.api.alerts import AlertmanagerSink, WebhookSink
from whyjob.api.risk import RiskWatch
from whyjob.core.index import SqliteIndex
from whyjob.explain.engine import explain_experiment
from whyjob.explain.ruleset import load_rules


def _active(url: str) -> list[dict[str, Any]]:
    query = urllib.parse.urlencode({"active": "true", "silenced": "false", "inhibited": "false"})
    with urllib.request.urlopen(f"{url}/api/v2/alerts?{query}") as response:
        alerts: list[dict[str, Any]] = orjson.loads(response.read())
    return [a for a in alerts if a["labels"].get("alertname") == "WhyjobExperimentAtRisk"]


def test_maintenance_ahead_warns_once_then_clears_in_alertmanager(
    index: SqliteIndex, tmp_path: Path
) -> None:
    _running(index)
    index.write([_maintenance(NOW + 40 * 60_000)])  # a window on rank 0's node, 2 h long
    rules = load_rules()

    def at(moment: int) -> list[Any]:
        return [explain_experiment(index, rules, "llama-ft", "ml", now=moment)]

    hook = Webhook()
    with alertmanager(tmp_path) as am:
        watch = RiskWatch(
            [AlertmanagerSink(am), WebhookSink(hook.url)],
            url_for=lambda ns, name: f"http://whyjob.example/experiments/{ns}/{name}",
        )
        assert watch.check(at(NOW)) == ["warned ml/llama-ft on gpu-node-1"]
        (alert,) = _active(am)
        assert alert["labels"] == {
            "alertname": "WhyjobExperimentAtRisk",
            "namespace": "ml",
            "experiment": "llama-ft",
            "node": "gpu-node-1",
            "reason": "notice.maintenance",
            "severity": "warning",
        }
        notes = alert["annotations"]
        assert notes["summary"] == (
            "llama-ft: scheduled maintenance on gpu-node-1 in 40m 00s (ranks worker-0)"
        )
        assert notes["window_start"] == "2026-03-04T12:40:00Z"
        assert notes["gpu_hours_at_risk"] == "40"
        assert "cordon and drain gpu-node-1" in notes["advice"]
        assert watch.check(at(NOW + 10 * 60_000)) == []  # renewed for Alertmanager, said once
        assert len(_active(am)) == 1
        # Under way, the window still holds; once it has passed, the warning clears.
        assert watch.check(at(NOW + HOUR_AND_A_HALF)) == []
        assert watch.check(at(NOW + 3 * 3_600_000)) == ["cleared ml/llama-ft on gpu-node-1"]
        assert _active(am) == []
    assert [(m["status"], m["alert"]["node"]) for m in hook.received] == [
        ("firing", "gpu-node-1"),
        ("resolved", "gpu-node-1"),
    ]


HOUR_AND_A_HALF = 90 * 60_000


def test_the_team_channel_and_the_owner_hear_once_in_the_experiments_thread(
    index: SqliteIndex,
) -> None:
    from slack_sdk import WebClient

    from tests.standins.slack import SlackStandin
    from whyjob.api.slack import MemoryThreadStore, OwnerRoute
    from whyjob.api.slackwire import SlackRiskSink

    _running(index)
    index.write([_maintenance(NOW + 40 * 60_000)])
    rules = load_rules()

    def at(moment: int) -> list[Any]:
        return [explain_experiment(index, rules, "llama-ft", "ml", now=moment)]

    owners = {"uid-0": {"whyjob.io/owner": "U0ALICE01"}}
    with SlackStandin(users={"alice@example.com": "U0ALICE01"}) as slack:
        client = WebClient(token=slack.token, base_url=slack.url + "/api/")
        sink = SlackRiskSink(client, MemoryThreadStore(), [OwnerRoute()], "#ml-alerts",
                             lambda uid: owners.get(uid, {}))  # fmt: skip
        watch = RiskWatch([sink], url_for=lambda ns, name: f"https://whyjob.example/{ns}/{name}")
        assert watch.check(at(NOW)) == ["warned ml/llama-ft on gpu-node-1"]
        assert watch.check(at(NOW + 10 * 60_000)) == []
        assert watch.check(at(NOW + 3 * 3_600_000)) == ["cleared ml/llama-ft on gpu-node-1"]
        channel = slack.posts("#ml-alerts")
        direct = [m for m in slack.messages if m not in channel]
    warned, cleared = channel
    assert warned["text"].startswith(
        ":warning: *At risk*: llama-ft (ml): scheduled maintenance on gpu-node-1 in 40m 00s"
    )
    assert "40 GPU-hours since the last checkpoint 2026-03-04T11:20:00Z" in warned["text"]
    assert cleared["thread_ts"] == warned["ts"]  # the clearing answers in the warning's thread
    assert [m["text"][:20] for m in direct] == [":warning: *At risk*:", ":white_check_mark: l"]
