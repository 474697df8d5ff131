"""The DCGM collector against a real Prometheus (Debian package) scraping a local endpoint that
serves dcgm-exporter text, and scraping that endpoint directly."""

from __future__ import annotations

import re
import time
import urllib.parse
from pathlib import Path

import orjson

from tests.standins.services import TextEndpoint, prometheus
from whyjob.collector.live.dcgm import DcgmScrape, PrometheusDcgm
from whyjob.core.evidence import Evidence

# The offline fixture up to its deliberately damaged tail (kept there for the parser's own
# tests: a real exporter never writes it, and Prometheus would refuse the whole scrape).
_FIXTURE = (Path(__file__).parents[1] / "fixtures" / "dcgm" / "scrape.prom").read_text()
INCIDENT = _FIXTURE[: _FIXTURE.index("# HELP go_goroutines")]
GPU0 = "GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52"


def _healthy(text: str) -> str:
    """The same exporter page before the incident: no Xid, ECC, NVLink or remap errors, cool
    GPUs running at full clocks."""
    zero = r"XID_ERRORS|ECC_\w+|NVLINK_\w+|ROW_REMAP_\w+|UNCORRECTABLE_\w+|CLOCKS?_\w*REASONS"
    text = re.sub(rf"^(DCGM_FI_DEV_(?:{zero})\{{.*\}}) \S+$", r"\1 0", text, flags=re.M)
    text = re.sub(r"^(DCGM_FI_DEV_GPU_TEMP\{.*\}) \S+$", r"\1 45", text, flags=re.M)
    kept = [line for line in text.splitlines() if not line.startswith("DCGM_EXP_XID_ERRORS_COUNT{")]
    return "\n".join(kept) + "\n"


def _evidence(items: list[object]) -> list[Evidence]:
    return [i for i in items if isinstance(i, Evidence)]


def _wait_for_samples(url: str, query: str, value: float) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with urllib.request.urlopen(
            f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        ) as r:
            result = orjson.loads(r.read())["data"]["result"]
        if result and float(result[0]["value"][1]) == value:
            return
        time.sleep(0.2)
    raise TimeoutError(f"{query} never became {value}")


def test_prometheus_changes_become_gpu_evidence_once(tmp_path: Path) -> None:
    with (
        TextEndpoint(_healthy(INCIDENT)) as exporter,
        prometheus(tmp_path, [exporter.address]) as url,
    ):
        xid_query = f'DCGM_FI_DEV_XID_ERRORS{{UUID="{GPU0}"}}'
        _wait_for_samples(url, xid_query, 0)
        poll = PrometheusDcgm(url, step_s=1, first_lookback_s=30)
        quiet = poll(None)
        assert not [
            e
            for e in _evidence(quiet.items)
            if e.kind.startswith("gpu.") and e.kind != "gpu.status"
        ]
        exporter.text = INCIDENT  # GPU 0 falls off the bus; double-bit ECC on GPU 1
        _wait_for_samples(url, xid_query, 79)
        time.sleep(1.5)
        incident = poll(quiet.checkpoint)
        records = _evidence(incident.items)
        xids = [e for e in records if e.kind == "gpu.xid" and e.attrs.get("latched")]
        assert len(xids) == 1 and xids[0].attrs["xid"] == 79 and xids[0].gpu_uuid == GPU0
        assert xids[0].node == "gpu-node-7"  # the exporter's Hostname label
        assert (xids[0].namespace, xids[0].pod) == ("ml-team", "llm-pretrain-worker-3")
        assert xids[0].attrs["prometheus"].startswith(f"{url}/graph?g0.expr=DCGM_FI_DEV_XID_ERRORS")
        assert any(e.kind == "gpu.ecc" for e in records)
        assert not [e for e in records if e.kind == "gpu.status"], "raw series stay in Prometheus"
        time.sleep(1.5)
        again = poll(incident.checkpoint)  # nothing changed since
        assert not [
            e for e in _evidence(again.items) if e.kind == "gpu.xid" and e.attrs.get("latched")
        ]
        # A restarted collector learns the values at its checkpoint first: no repeat either.
        restarted = PrometheusDcgm(url, step_s=1)(again.checkpoint)
        assert not [
            e for e in _evidence(restarted.items) if e.kind == "gpu.xid" and e.attrs.get("latched")
        ]


def test_scraping_the_exporter_directly(tmp_path: Path) -> None:
    with TextEndpoint(_healthy(INCIDENT)) as exporter:
        scrape = DcgmScrape([f"http://{exporter.address}/metrics"])
        assert not [e for e in _evidence(scrape(None).items) if e.kind == "gpu.xid"]
        exporter.text = INCIDENT
        records = _evidence(scrape(None).items)
        assert [
            e.attrs["xid"] for e in records if e.kind == "gpu.xid" and e.attrs.get("latched")
        ] == [79]
        assert not [
            e
            for e in _evidence(scrape(None).items)
            if e.kind == "gpu.xid" and e.attrs.get("latched")
        ]
