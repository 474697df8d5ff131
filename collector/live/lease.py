"""One sender among several `whyjob serve` replicas: leader election through a Kubernetes
Lease (coordination.k8s.io/v1), the way client-go's leaderelection package holds one.

The holder renews the Lease on its own thread every retry period (2 s for the default 15 s
lease), whatever the alert rounds do. Another replica takes it over only once the record has
not changed for a whole lease duration *by its own clock*: like client-go's observedTime, the
moment a replica saw the holder's record change, never the holder's renewTime against the
local clock, so clocks that disagree cannot hand over a live lease. The holder counts itself
the holder only while its last successful renewal is younger than the renew deadline (10 s),
so a stalled holder stops sending before another may start. Every write carries the
resourceVersion it read: two replicas racing for a free Lease cannot both win (the API server
answers the second with 409 Conflict). On a clean stop the holder gives the Lease up at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
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
        duration_s: float = 15,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if duration_s < 3:
            raise ValueError(f"a lease of {duration_s:g} s is too short to renew (3 s at least)")
        self._coordination = k8s.CoordinationV1Api(api)
        self.namespace, self.name, self.identity = namespace, name, identity
        # client-go's proportions (15 s lease, 10 s renew deadline, 2 s retry period).
        self.duration_s = duration_s
        self.renew_deadline_s = duration_s * 2 / 3
        self.retry_period_s = duration_s * 2 / 15
        self._clock, self._monotonic = clock, monotonic
        self._observed: tuple[tuple[Any, ...], float] | None = None  # a record, when first seen
        self._renewed: float | None = None  # when this replica last wrote the Lease as holder
        self._thread: threading.Thread | None = None

    @property
    def holding(self) -> bool:
        """This replica holds the Lease and renewed it within the renew deadline."""
        renewed = self._renewed
        return renewed is not None and self._monotonic() - renewed < self.renew_deadline_s

    def hold(self) -> bool:
        """Acquire or renew the Lease once; True while this replica is the one that sends."""
        try:
            if self._hold():
                self._renewed = self._monotonic()
            else:
                self._renewed = None
        except k8s.ApiException as exc:
            if exc.status != 409:  # 409: another replica wrote first; anything else is news
                raise
            self._renewed = None
        return self.holding

    def start(self, stop: threading.Event, on_error: Callable[[str], object]) -> None:
        """Keep holding (or trying to) every retry period until `stop`; then give it up."""

        def run() -> None:
            stop.wait(self.retry_period_s)  # the first try was made below, before returning
            while not stop.is_set():
                try:
                    self.hold()
                except Exception as exc:  # the API server is away: `holding` lapses meanwhile
                    on_error(f"lease {self.namespace}/{self.name}: {type(exc).__name__}: {exc}")
                stop.wait(self.retry_period_s)
            self.release()

        try:  # at once, so the first round knows whether to send
            self.hold()
        except Exception as exc:
            on_error(f"lease {self.namespace}/{self.name}: {type(exc).__name__}: {exc}")
        self._thread = threading.Thread(target=run, name="whyjob-lease", daemon=True)
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def _hold(self) -> bool:
        now, seen = self._now(), self._monotonic()
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
        record = (spec.holder_identity, spec.renew_time, spec.lease_transitions)
        if self._observed is None or self._observed[0] != record:
            self._observed = (record, seen)
        mine = spec.holder_identity == self.identity
        duration = spec.lease_duration_seconds or self.duration_s
        expired = seen - self._observed[1] > duration
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
            lease_duration_seconds=max(1, round(self.duration_s)),
            acquire_time=acquired,
            renew_time=now,
            lease_transitions=transitions,
        )

    def release(self) -> None:
        """Give the Lease up (a clean stop), so the next replica need not wait for it to expire."""
        if self._renewed is None:
            return
        self._renewed = None
        try:
            lease = self._coordination.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                self._coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        except k8s.ApiException:
            pass  # it expires on its own
