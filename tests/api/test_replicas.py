"""Several `whyjob serve` replicas: a Kubernetes Lease (on the API stand-in, through the
official client) picks the one that sends; what was fired lives in the index, so neither a new
leader nor a restarted server sends it again."""

from __future__ import annotations

import io
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

from kubernetes import client as k8s

from tests.api.conftest import World
from tests.api.test_alerts import Webhook
from tests.standins.kubeapi import KubeAPI
from whyjob.api.config import load_surface_config
from whyjob.api.serve import Served, build
from whyjob.collector.live.lease import LeaseElector
from whyjob.explain.ruleset import load_rules

WINDOW_S = 9000 * 3600  # the simulated incidents are months old


def test_the_lease_goes_to_one_replica_and_over_when_it_lapses() -> None:
    clock = [1_800_000_000.0]
    with KubeAPI() as api:
        client = k8s.ApiClient(api.client_configuration())

        def elector(identity: str) -> LeaseElector:
            return LeaseElector(client, "whyjob", "whyjob-serve", identity, duration_s=15,
                                clock=lambda: clock[0], monotonic=lambda: clock[0])  # fmt: skip

        a, b = elector("serve-a"), elector("serve-b")
        assert a.hold() and not b.hold()
        clock[0] += 10
        assert a.hold() and not b.hold()  # renewed in time
        clock[0] += 16  # a stopped renewing: its lease lapses
        assert not a.holding  # past its renew deadline, it already stopped sending
        assert b.hold() and not a.hold()
        held = api.leases[("whyjob", "whyjob-serve")]["spec"]
        assert held["holderIdentity"] == "serve-b" and held["leaseTransitions"] == 1
        b.release()  # a clean stop: the next one need not wait
        assert not b.holding and a.hold()


def test_a_clock_that_disagrees_cannot_take_a_live_lease() -> None:
    # The holder's clock is five minutes behind: its renewTime looks long expired to the other,
    # which judges expiry by when it saw the record change, on its own clock.
    mono = [0.0]
    with KubeAPI() as api:
        client = k8s.ApiClient(api.client_configuration())
        a = LeaseElector(client, "whyjob", "skew", "serve-a", clock=lambda: 1_800_000_000 - 300 + mono[0],
                         monotonic=lambda: mono[0])  # fmt: skip
        b = LeaseElector(client, "whyjob", "skew", "serve-b", clock=lambda: 1_800_000_000 + mono[0],
                         monotonic=lambda: mono[0])  # fmt: skip
        assert a.hold() and not b.hold()
        for _ in range(10):  # a renews every 2 s; b never sees the record stand still 15 s
            mono[0] += 2
            assert a.hold() and not b.hold()
        mono[0] += 16  # a stopped: now the record stood still for a whole lease
        assert b.hold()


def test_the_holder_renews_between_rounds_and_gives_the_lease_up_on_a_clean_stop() -> None:
    # Rounds a minute apart, a lease of a few seconds: the holder's own thread keeps it.
    with KubeAPI() as api:
        client = k8s.ApiClient(api.client_configuration())
        a = LeaseElector(client, "whyjob", "renew", "serve-a", duration_s=3)
        b = LeaseElector(client, "whyjob", "renew", "serve-b", duration_s=3)
        stop = threading.Event()
        a.start(stop, on_error=print)
        deadline = time.monotonic() + 5  # more than a lease: it was renewed meanwhile
        while time.monotonic() < deadline:
            assert a.holding and not b.hold()
            time.sleep(0.25)
        stop.set()
        a.join(5)
        assert not a.holding and b.hold()  # given up at the stop, not left to expire


def test_a_racing_write_loses_with_a_conflict() -> None:
    with KubeAPI() as api:
        client = k8s.ApiClient(api.client_configuration())
        a = LeaseElector(client, "whyjob", "race", "serve-a")
        assert a.hold()
        coordination = k8s.CoordinationV1Api(client)
        stale = coordination.read_namespaced_lease("race", "whyjob")
        assert a.hold()  # the lease moves on: the copy read above is stale now
        stale.spec.holder_identity = "serve-b"
        try:
            coordination.replace_namespaced_lease("race", "whyjob", stale)
        except k8s.ApiException as exc:
            assert exc.status == 409
        else:
            raise AssertionError("a stale write must be refused")


def _fired(hook: Webhook) -> Counter[str]:
    return Counter(m["alert"]["experiment"] for m in hook.received if m["status"] == "firing")


def _replica(index: Path, config: Path, client: k8s.ApiClient) -> Served:
    return build(load_surface_config(config), index, load_rules(), lease_client=client)


def test_two_replicas_send_each_alert_once_and_a_new_leader_remembers(
    world: World, tmp_path: Path
) -> None:
    index = tmp_path / "index.sqlite"
    shutil.copyfile(world.index, index)
    hook = Webhook()
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text("tokens:\n  - {name: ops, token: ops-token, namespaces: ['*']}\n")
    config = tmp_path / "config.yaml"
    config.write_text(
        f"api:\n  tokens: {tokens}\n  lease: whyjob/whyjob-serve\n  lease_duration: 15s\n"
        f"alerts:\n  window: 9000h\n  webhook: {hook.url}\n"
    )
    with KubeAPI() as api:
        client = k8s.ApiClient(api.client_configuration())
        first, second = _replica(index, config, client), _replica(index, config, client)
        first.leader.identity, second.leader.identity = "serve-a", "serve-b"
        log = io.StringIO()
        for _ in range(3):  # both replicas run every round; only the holder sends
            first.leader.hold()  # what each one's renewal thread does in between
            second.leader.hold()
            first.check(WINDOW_S, log)
            second.check(WINDOW_S, log)
        fired = _fired(hook)
        assert world.b[1] in fired and set(fired.values()) == {1}  # each loop once
        assert "holding the lease as serve-a" in log.getvalue()
        # The holder stops cleanly; the other takes over and remembers what was fired.
        first.leader.release()
        second.leader.hold()
        second.check(WINDOW_S, log)
        assert "holding the lease as serve-b" in log.getvalue()
        assert _fired(hook) == fired
        # A restarted server (a new process on the same index) remembers too.
        second.leader.release()
        restarted = _replica(index, config, client)
        restarted.leader.hold()
        restarted.check(WINDOW_S, log)
        assert _fired(hook) == fired
        assert restarted.detector is not None
        assert {name for _, name in restarted.detector.firing} == set(fired)
