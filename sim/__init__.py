"""The incident simulator: writes realistic export bundles with a truth file.

A bundle is what a person has after an incident on a GPU training cluster: `kubectl` exports
(events, pods, nodes), cloud API output (AWS, GCE or Azure), dcgm-exporter scrapes, kernel logs
and the kubelet's container log files, in the real formats, plus `truth.json` naming the root
cause of every attempt. whyjob's parsers read bundles as if they were real, so tests and the
accuracy benchmark can check every diagnosis against a known answer.

    from whyjob.sim import SCENARIOS, simulate
    truth = simulate("xid79", seed=7, out=Path("bundle"))
"""

from whyjob.sim.bundle import Plan, plan, simulate
from whyjob.sim.scenarios import SCENARIOS, Scenario
from whyjob.sim.truth import AttemptTruth, Truth

__all__ = ["SCENARIOS", "AttemptTruth", "Plan", "Scenario", "Truth", "plan", "simulate"]
