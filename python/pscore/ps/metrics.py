"""A Prometheus /metrics endpoint for a parameter-server shard, served by prometheus-client from
a background thread on loopback; each scrape reads the shard's live stats."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Callable

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

__all__ = ["MetricsServer", "ShardCollector"]

_COUNTERS = {
    "bytes_in": "Bytes received from workers",
    "bytes_out": "Bytes sent to workers",
    "rows_pushed": "Sparse rows pushed",
    "rows_pulled": "Sparse rows pulled",
    "connections_accepted": "Connections accepted",
    "dropped_connections": "Connections dropped for protocol violations or failed auth",
    "auth_failures": "Handshakes that failed authentication",
    "errors": "Requests answered with an error",
}
_GAUGES = {
    "queue_depth": "Requests received and not yet handled",
    "connections": "Open connections",
    "tables": "Tables held by this shard",
    "sparse_rows": "Sparse rows held by this shard",
    "dense_elements": "Dense elements held by this shard",
}


class ShardCollector:
    """Turns one shard's stats dict (the server's stats JSON) into metric families."""

    def __init__(self, stats_json: Callable[[], str]):
        self._stats_json = stats_json

    def collect(self) -> Iterator[Metric]:
        stats = json.loads(self._stats_json())
        shard = str(stats.get("shard", 0))
        requests = CounterMetricFamily(
            "pscore_ps_requests", "Requests handled, by type", labels=["shard", "type"]
        )
        for kind, n in sorted(stats.get("requests_by_type", {}).items()):
            requests.add_metric([shard, kind], n)
        yield requests
        for key, help_text in _COUNTERS.items():
            yield _labelled(CounterMetricFamily, key, help_text, shard, stats)
        for key, help_text in _GAUGES.items():
            yield _labelled(GaugeMetricFamily, key, help_text, shard, stats)
        latency = Metric(
            "pscore_ps_request_latency_us", "Request latency (receipt to reply) in us", "summary"
        )
        for q, key in (("0.5", "latency_p50_us"), ("0.99", "latency_p99_us")):
            latency.add_sample(
                "pscore_ps_request_latency_us", {"shard": shard, "quantile": q}, stats.get(key, 0)
            )
        latency.add_sample(
            "pscore_ps_request_latency_us_count", {"shard": shard}, stats.get("latency_count", 0)
        )
        yield latency


def _labelled(family, key: str, help_text: str, shard: str, stats: dict) -> Metric:
    metric = family(f"pscore_ps_{key}", help_text, labels=["shard"])
    metric.add_metric([shard], stats.get(key, 0))
    return metric


class MetricsServer:
    """Serves the shard's metrics over HTTP on host:port (port 0 picks one)."""

    def __init__(self, stats_json: Callable[[], str], port: int, host: str = "127.0.0.1"):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(ShardCollector(stats_json))
        self._httpd, self._thread = start_http_server(port, addr=host, registry=registry)
        self.port = self._httpd.server_port

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
