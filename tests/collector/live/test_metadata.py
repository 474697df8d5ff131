"""Node-local notices from metadata-service stand-ins that enforce the real access rules."""

from __future__ import annotations

from pathlib import Path

from tests.standins.metadata import MetadataService
from whyjob.collector.live.metadata import AwsImds, AzureScheduledEvents, GceMetadata
from whyjob.core.evidence import Evidence

FIXTURES = Path(__file__).parents[1] / "fixtures"
NODE = "ip-10-0-1-17.ec2.internal"


def _kinds(items: list[object]) -> list[str]:
    return sorted(i.kind for i in items if isinstance(i, Evidence))


def test_imds_v2_spot_rebalance_and_scheduled_events() -> None:
    with MetadataService("aws") as imds:
        imds.documents["/latest/meta-data/instance-id"] = b"i-0a1b2c3d4e5f60718"
        poll = AwsImds(NODE, base=imds.url)
        assert poll(None).items == []  # nothing announced yet: every path answers 404
        imds.documents["/latest/meta-data/spot/instance-action"] = (
            FIXTURES / "aws" / "imds-instance-action.json"
        ).read_bytes()
        imds.documents["/latest/meta-data/events/recommendations/rebalance"] = (
            FIXTURES / "aws" / "imds-rebalance.json"
        ).read_bytes()
        imds.documents["/latest/meta-data/events/maintenance/scheduled"] = (
            FIXTURES / "aws" / "imds-scheduled.json"
        ).read_bytes()
        items = poll(None).items
        assert _kinds(items) == [
            "maintenance.scheduled",
            "maintenance.scheduled",
            "spot.interruption",
            "spot.rebalance",
        ]
        spot = next(i for i in items if isinstance(i, Evidence) and i.kind == "spot.interruption")
        assert (spot.node, spot.instance_id) == (NODE, "i-0a1b2c3d4e5f60718")
        # One session token for every request, and it was sent on each.
        puts = [r for r in imds.requests if r[0] == "PUT"]
        headers = {k.lower(): v for k, v in puts[0][2].items()}
        assert len(puts) == 1 and headers["x-aws-ec2-metadata-token-ttl-seconds"] == "21600"
        imds.tokens.clear()  # the token expires or is revoked: a new one, and the read succeeds
        assert _kinds(poll(None).items) == _kinds(items)
        assert len([r for r in imds.requests if r[0] == "PUT"]) == 2


def test_gce_maintenance_event_upcoming_and_preempted_dated_once() -> None:
    with MetadataService("gce") as server:
        base = "/computeMetadata/v1/instance/"
        server.documents[base + "maintenance-event"] = b"NONE"
        server.documents[base + "preempted"] = b"FALSE"
        poll = GceMetadata("gke-a3-pool-0lte", base=server.url)
        first = poll(None)
        assert first.items == []
        server.documents[base + "maintenance-event"] = b"TERMINATE_ON_HOST_MAINTENANCE"
        server.documents[base + "upcoming-maintenance"] = (
            FIXTURES / "gce" / "upcoming-maintenance.json"
        ).read_bytes()
        server.documents[base + "preempted"] = b"TRUE"
        second = poll(first.checkpoint)
        assert _kinds(second.items) == [
            "maintenance.scheduled",
            "maintenance.scheduled",
            "spot.interruption",
        ]
        # Read again, and read by a restarted agent from the checkpoint: the same records.
        third = GceMetadata("gke-a3-pool-0lte", base=server.url)(second.checkpoint)
        ids = lambda poll_: sorted(i.id for i in poll_.items if isinstance(i, Evidence))  # noqa: E731
        assert ids(third) == ids(second) == ids(poll(second.checkpoint))
        assert all(r[2].get("Metadata-Flavor") == "Google" for r in server.requests)


def test_azure_scheduled_events_name_the_node() -> None:
    with MetadataService("azure") as imds:
        imds.documents["/metadata/scheduledevents?api-version=2020-07-01"] = (
            FIXTURES / "azure" / "scheduled-events.json"
        ).read_bytes()
        items = AzureScheduledEvents("aks-gpupool-12345678-vmss000003", base=imds.url)(None).items
        records = [i for i in items if isinstance(i, Evidence)]
        assert records and {r.node for r in records} >= {"aks-gpupool-12345678-vmss000003"}
        assert all(r[2].get("Metadata") == "true" for r in imds.requests)
