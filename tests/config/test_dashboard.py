"""config/grafana-dashboard.json reads only what a daemon serves: every metric its queries
name, and every label they group by, is in /metrics from the start, before anything happened."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from daemon.service.health import HealthServer
from daemon.service.metrics import Metrics
from daemon.sim.cluster import SimCluster
from tests.daemon.embedded import embedded, settings_for

pytestmark = pytest.mark.anyio

DASHBOARD = Path(__file__).resolve().parents[2] / "config" / "grafana-dashboard.json"
_METRIC = re.compile(r"\b((?:kbatchd|process)_[a-z_]+)\b")
_BY = re.compile(r"\bby \(([^)]*)\)")
# Labels Prometheus adds when it scrapes, and the bucket bound of a histogram.
_SCRAPED = frozenset({"instance", "job", "le"})


def _queries(dashboard: dict[str, Any]) -> list[str]:
    queries = [
        target["expr"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", ())
        if target.get("expr")
    ]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            queries.append(query["query"])
    return queries


def _series(text: str) -> dict[str, set[str]]:
    """Sample name -> the label names any of its series has."""
    series: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, labels = line.rpartition(" ")[0].partition("{")
        series.setdefault(name, set()).update(re.findall(r'(\w+)="', labels))
    return series


def test_the_dashboard_is_a_grafana_dashboard_with_queries() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "kbatchd"
    assert len(_queries(dashboard)) >= 20
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


async def test_every_metric_and_label_the_dashboard_reads_is_served_from_the_start(
    tmp_path: Path,
) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    metrics = Metrics()
    async with SimCluster.start(topology="blocks=1,racks=1,hosts=1,gpus=8") as sim:
        settings = settings_for(sim, tmp_path / "kbatchd.db")
        async with embedded(settings, metrics=metrics) as daemon:
            health = HealthServer(daemon, metrics, stale_after=10)
            url = await health.start("127.0.0.1", 0)
            try:
                async with (
                    aiohttp.ClientSession() as session,
                    session.get(f"{url}/metrics") as response,
                ):
                    text = await response.text()
            finally:
                await health.stop()
    served = _series(text)
    for query in _queries(dashboard):
        names = _METRIC.findall(query)
        assert names, query
        missing = [name for name in names if name not in served]
        assert not missing, f"{query}: {missing} not in /metrics"
        labels = set().union(*(served[name] for name in names)) | _SCRAPED
        for grouped in _BY.findall(query):
            unknown = {label.strip() for label in grouped.split(",")} - labels
            assert not unknown, f"{query}: no series has the labels {unknown}"
