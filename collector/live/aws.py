"""AWS through boto3: Auto Scaling activities and EC2 scheduled events, polled.

The clients are passed in (a `boto3` client for `autoscaling` and one for `ec2`), so tests use
botocore's Stubber and deployments whatever credentials chain boto3 finds. Answers go through
the same parsers as `whyjob ingest` of the matching `aws ... --output json` files; boto3 hands
back datetimes where the CLI prints strings, so each page is normalised through JSON first.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import orjson

from whyjob.collector.ingest import aws
from whyjob.collector.ingest.base import Context, IngestOptions, Item
from whyjob.collector.live.poller import Poll
from whyjob.core.evidence import Evidence

__all__ = ["AsgActivities", "InstanceStatus", "boto3_client"]

# How far back each poll re-reads: an activity still InProgress changes (its StatusCode, its
# EndTime) and each change is a new version of the record; older ones are final.
_REREAD_MS: Final = 2 * 3600 * 1000


def _plain(page: Mapping[str, Any]) -> dict[str, Any]:
    """A boto3 answer as the AWS CLI prints it: datetimes as ISO strings."""
    return dict(orjson.loads(orjson.dumps(page, default=str)))


class AsgActivities:
    """`describe-scaling-activities`, newest first, page by page, until the pages are older
    than the last poll (less a margin for activities still in progress). Records are keyed by
    ActivityId and status, so reading an activity again stores nothing new."""

    def __init__(
        self,
        client: Any,  # boto3 autoscaling client
        groups: Sequence[str] = (),
        options: IngestOptions | None = None,
        page_size: int = 100,
    ) -> None:
        self.client = client
        self.groups = tuple(groups)
        self.options = options or IngestOptions()
        self.page_size = page_size

    def __call__(self, checkpoint: str | None) -> Poll:
        since = int(checkpoint) - _REREAD_MS if checkpoint else None
        items: list[Item] = []
        newest: int | None = None
        for group in self.groups or (None,):
            for page in self._pages(group):
                ctx = Context(f"aws:autoscaling/{group or '*'}", self.options)
                parsed = list(aws.parse_scaling_activities(ctx, _plain(page), None))
                items += parsed
                starts = [i.ts for i in parsed if isinstance(i, Evidence)]
                if starts:
                    newest = max(newest or 0, max(starts))
                if since is not None and starts and min(starts) < since:
                    break  # the rest is older than anything that can still change
        return Poll(items, str(newest) if newest else checkpoint, newest)

    def _pages(self, group: str | None) -> Iterator[Mapping[str, Any]]:
        paginator = self.client.get_paginator("describe_scaling_activities")
        kwargs: dict[str, Any] = {"PaginationConfig": {"PageSize": self.page_size}}
        if group:
            kwargs["AutoScalingGroupName"] = group
        yield from paginator.paginate(**kwargs)


class InstanceStatus:
    """`describe-instance-status --include-all-instances`: scheduled events (reboots,
    retirements, maintenance) and impaired status checks, for all or the given instances."""

    def __init__(
        self,
        client: Any,  # boto3 ec2 client
        instances: Sequence[str] = (),
        options: IngestOptions | None = None,
    ) -> None:
        self.client = client
        self.instances = tuple(instances)
        self.options = options or IngestOptions()

    def __call__(self, checkpoint: str | None) -> Poll:
        paginator = self.client.get_paginator("describe_instance_status")
        kwargs: dict[str, Any] = {"IncludeAllInstances": True}
        if self.instances:
            kwargs["InstanceIds"] = list(self.instances)
        items: list[Item] = []
        for page in paginator.paginate(**kwargs):
            ctx = Context("aws:ec2/instance-status", self.options)
            items += aws.parse_instance_status(ctx, _plain(page), None)
        return Poll(items, None, None)


def boto3_client(service: str, settings: Mapping[str, Any]) -> Any:
    """A boto3 client for `service` from a collector's `region` and `profile` settings."""
    import boto3

    session = boto3.session.Session(
        region_name=settings.get("region"), profile_name=settings.get("profile")
    )
    return session.client(service)
