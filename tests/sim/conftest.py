"""Shared fixtures: bundles are written once per session (simulating is the slow part), and a
small reader for the files a bundle holds."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from whyjob.sim import Truth, simulate

CRI_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (stdout|stderr) ([PF]) (.*)$")
JOURNAL_LINE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+0000 (\S+) kernel: (.*)$")
PROM_SAMPLE = re.compile(r'^([A-Z_]+)\{((?:[A-Za-z_]+="[^"]*",?)+)\} (-?[0-9.e+]+) (\d{13})$')
RFC3339_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$")
BundleFactory = Callable[..., tuple[Path, Truth]]


class BundleFiles:
    """Just enough parsing to check a bundle as its tools wrote it."""

    CRI_LINE = CRI_LINE
    JOURNAL_LINE = JOURNAL_LINE
    PROM_SAMPLE = PROM_SAMPLE
    RFC3339_Z = RFC3339_Z

    @staticmethod
    def load(path: Path) -> Any:
        return json.loads(path.read_text())

    @staticmethod
    def items(path: Path) -> list[dict[str, Any]]:
        doc = BundleFiles.load(path)
        assert doc["kind"] == "List" and doc["apiVersion"] == "v1", path
        assert doc["metadata"] == {"resourceVersion": ""}, path
        result: list[dict[str, Any]] = doc["items"]
        return result

    @staticmethod
    def events(out: Path) -> list[dict[str, Any]]:
        return BundleFiles.items(out / "k8s" / "events.json")

    @staticmethod
    def pod_snapshots(out: Path, uid: str) -> list[dict[str, Any]]:
        """Every stored version of one pod, oldest first."""
        found = sorted(
            (out / "k8s" / "pods").glob(f"*_{uid}_*.json"),
            key=lambda p: int(p.stem.rsplit("_", 1)[1]),
        )
        return [BundleFiles.load(p) for p in found]

    @staticmethod
    def container_states(out: Path, uid: str) -> list[dict[str, Any]]:
        """Every terminated state (current or last) any snapshot of the pod shows."""
        states = []
        for body in BundleFiles.pod_snapshots(out, uid):
            for status in body["status"].get("containerStatuses", []):
                for key in ("state", "lastState"):
                    terminated = status.get(key, {}).get("terminated")
                    if terminated:
                        states.append(terminated)
        return states

    @staticmethod
    def log_text(
        out: Path, namespace: str, pod: str, uid: str, container: str, restart: int
    ) -> str:
        path = out / "var/log/pods" / f"{namespace}_{pod}_{uid}" / container / f"{restart}.log"
        lines = []
        for raw in path.read_text().splitlines():
            match = CRI_LINE.match(raw)
            assert match, raw
            lines.append(match.group(4))
        return "\n".join(lines)

    @staticmethod
    def kernel(out: Path, node: str) -> str:
        return (out / "nodes" / node / "kern.log").read_text()

    @staticmethod
    def node_objects(out: Path) -> list[dict[str, Any]]:
        """Every node version in the bundle: snapshots, then the final list."""
        found = [BundleFiles.load(p) for p in sorted((out / "k8s" / "nodes").glob("*.json"))]
        return found + BundleFiles.items(out / "k8s" / "nodes.json")

    @staticmethod
    def instance_id(out: Path, node: str) -> str:
        for body in BundleFiles.node_objects(out):
            if body["metadata"]["name"] == node:
                provider: str = body["spec"]["providerID"]
                return provider.rsplit("/", 1)[1]
        raise KeyError(node)

    @staticmethod
    def pods_yaml(out: Path) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load((out / "k8s" / "pods.yaml").read_text())
        return doc


@pytest.fixture(scope="session")
def files() -> type[BundleFiles]:
    return BundleFiles


@pytest.fixture(scope="session")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> BundleFactory:
    """`bundle(scenario, seed, noise=True)` -> (folder, truth), cached for the session."""
    cache: dict[tuple[str, int, bool], tuple[Path, Truth]] = {}

    def make(scenario: str, seed: int, noise: bool = True) -> tuple[Path, Truth]:
        key = (scenario, seed, noise)
        if key not in cache:
            out = tmp_path_factory.mktemp(f"{scenario}-{seed}-{'noise' if noise else 'quiet'}")
            cache[key] = (out, simulate(scenario, seed, out, noise=noise))
        return cache[key]

    return make


def _cases() -> list[tuple[str, int]]:
    """Seed 1 of every scenario, plus a seed for each other cloud of the cloud-shaped ones."""
    from whyjob.sim import SCENARIOS, plan

    cases = [(scenario, 1) for scenario in SCENARIOS]
    for scenario in ("maintenance", "spot"):
        seen = {plan(scenario, 1).cloud}
        for seed in range(2, 60):
            cloud = plan(scenario, seed).cloud
            if cloud not in seen:
                seen.add(cloud)
                cases.append((scenario, seed))
    return cases


CASES = _cases()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests that take `case` run once per (scenario, seed) in CASES."""
    if "case" in metafunc.fixturenames:
        metafunc.parametrize("case", CASES, ids=[f"{s}-{n}" for s, n in CASES])
