"""One sender among several `whyjob serve` replicas: leader election through a Kubernetes
Lease (coordination.k8s.io/v1), the way client-go's leaderelection package holds one.

The holder renews the Lease every round; another replica takes it over only once
renewTime + leaseDurationSeconds has passed. Every write carries the resourceVersion it read,
so two replicas racing for an expired Lease cannot both win: the API server answers the second
with 409 Conflict. On a clean stop the holder gives the Lease up at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from kubernetes import client as k8s

__all__ = ["LeaseElector"]


class LeaseElector:
    def __init__(
        self,
        api: k8s.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        *,
        duration_s: int = 15,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._coordination = k8s.CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.duration_s = duration_s
        self._clock = clock
        self.holding = False

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def hold(self) -> bool:
        """Acquire or renew the Lease; True while this replica is the one that sends."""
        try:
            self.holding = self._hold()
        except k8s.ApiException as exc:
            if exc.status != 409:  # 409: another replica wrote first; anything else is news
                self.holding = False
                raise
            self.holding = False
        return self.holding

    def _hold(self) -> bool:
        now = self._now()
        try:
            lease = self._coordination.read_namespaced_lease(self.name, self.namespace)
        except k8s.ApiException as exc:
            if exc.status != 404:
                raise
            self._coordination.create_namespaced_lease(
                self.namespace,
                k8s.V1Lease(
                    metadata=k8s.V1ObjectMeta(name=self.name, namespace=self.namespace),
                    spec=self._spec(now, transitions=0, acquired=now),
                ),
            )
            return True
        spec: Any = lease.spec or k8s.V1LeaseSpec()
        mine = spec.holder_identity == self.identity
        renewed = spec.renew_time or spec.acquire_time
        duration = spec.lease_duration_seconds or self.duration_s
        expired = renewed is None or renewed + timedelta(seconds=duration) < now
        if not (mine or not spec.holder_identity or expired):
            return False
        transitions = (spec.lease_transitions or 0) + (0 if mine else 1)
        lease.spec = self._spec(now, transitions, spec.acquire_time if mine else now)
        # The version read goes back with the write: a racing replica's write makes this a 409.
        self._coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        return True

    def _spec(self, now: datetime, transitions: int, acquired: datetime | None) -> Any:
        return k8s.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self.duration_s,
            acquire_time=acquired,
            renew_time=now,
            lease_transitions=transitions,
        )

    def release(self) -> None:
        """Give the Lease up (a clean stop), so the next replica need not wait for it to expire."""
        if not self.holding:
            return
        try:
            lease = self._coordination.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                self._coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        except k8s.ApiException:
            pass  # it expires on its own
        self.holding = False
