"""A Prometheus /metrics endpoint for a parameter-server shard (text exposition format 0.0.4),
served from a background thread on loopback."""

from __future__ import annotations

import http.server
import json
import threading
from typing import Callable

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


def render(stats: dict) -> str:
    """Prometheus text for one shard's stats dict (from the server's stats JSON)."""
    shard = stats.get("shard", 0)
    label = f'shard="{shard}"'
    lines = [
        "# HELP pscore_ps_requests_total Requests handled, by type",
        "# TYPE pscore_ps_requests_total counter",
    ]
    for kind, n in sorted(stats.get("requests_by_type", {}).items()):
        lines.append(f'pscore_ps_requests_total{{{label},type="{kind}"}} {n}')
    for key, help_text in _COUNTERS.items():
        lines += [
            f"# HELP pscore_ps_{key}_total {help_text}",
            f"# TYPE pscore_ps_{key}_total counter",
            f"pscore_ps_{key}_total{{{label}}} {stats.get(key, 0)}",
        ]
    for key, help_text in _GAUGES.items():
        lines += [
            f"# HELP pscore_ps_{key} {help_text}",
            f"# TYPE pscore_ps_{key} gauge",
            f"pscore_ps_{key}{{{label}}} {stats.get(key, 0)}",
        ]
    lines += [
        "# HELP pscore_ps_request_latency_us Request latency (receipt to reply) in us",
        "# TYPE pscore_ps_request_latency_us summary",
        f'pscore_ps_request_latency_us{{{label},quantile="0.5"}} {stats.get("latency_p50_us", 0)}',
        f'pscore_ps_request_latency_us{{{label},quantile="0.99"}} {stats.get("latency_p99_us", 0)}',
        f"pscore_ps_request_latency_us_count{{{label}}} {stats.get('latency_count', 0)}",
    ]
    return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves GET /metrics on host:port (port 0 picks one) with render(stats_json())."""

    def __init__(self, stats_json: Callable[[], str], port: int, host: str = "127.0.0.1"):
        def handler_factory(*args, **kwargs):
            return _Handler(stats_json, *args, **kwargs)

        self._httpd = http.server.ThreadingHTTPServer((host, port), handler_factory)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="pscore-ps-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)


class _Handler(http.server.BaseHTTPRequestHandler):
    def __init__(self, stats_json, *args, **kwargs):
        self._stats_json = stats_json
        super().__init__(*args, **kwargs)

    def do_GET(self):
        if self.path.split("?")[0] != "/metrics":
            self.send_error(404, "only /metrics is served here")
            return
        body = render(json.loads(self._stats_json())).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt, *args):  # keep scrapes out of the server's stderr
        pass
