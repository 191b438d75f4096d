"""The server's Prometheus metrics, in a registry of its own (so two apps in one process never share counters)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from subspaces.serve.batcher import BatchInfo

# Latency buckets from 1 ms to 30 s; batch sizes and tokens in powers of two.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
SIZE_BUCKETS = tuple(float(2**i) for i in range(13))
TOKEN_BUCKETS = tuple(float(2**i) for i in range(4, 19))


class Metrics:
    """Requests and errors by route and status code, latencies, batches, queue depth and cache hit rates."""

    def __init__(self, queue_depth: Callable[[], float], cache_stats: Callable[[], dict[str, dict[str, Any]]]) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("subspaces_requests", "HTTP requests", ["route", "code"], registry=r)
        self.errors = Counter(
            "subspaces_request_errors", "HTTP responses with status >= 400", ["route", "code"], registry=r
        )
        self.latency = Histogram(
            "subspaces_request_seconds", "Time to answer a request", ["route"], buckets=LATENCY_BUCKETS, registry=r
        )
        self.batches = Counter("subspaces_batches", "Forward passes of the batcher", registry=r)
        self.batch_requests = Histogram(
            "subspaces_batch_requests", "Requests coalesced into one batch", buckets=SIZE_BUCKETS, registry=r
        )
        self.batch_texts = Histogram("subspaces_batch_texts", "Texts in one batch", buckets=SIZE_BUCKETS, registry=r)
        self.batch_tokens = Histogram(
            "subspaces_batch_tokens", "Padded tokens (texts x longest) in one batch", buckets=TOKEN_BUCKETS, registry=r
        )
        self.batch_seconds = Histogram(
            "subspaces_batch_seconds", "Time of one forward pass", buckets=LATENCY_BUCKETS, registry=r
        )
        self.tokens = Counter("subspaces_tokens", "Tokens encoded (after truncation)", registry=r)
        self.rejected = Counter("subspaces_rejected", "Requests refused because the queue was full", registry=r)
        Gauge("subspaces_queue_depth", "Requests waiting for the worker", registry=r).set_function(queue_depth)
        r.register(_CacheCollector(cache_stats))

    def observe_request(self, route: str, code: int, seconds: float) -> None:
        self.requests.labels(route, str(code)).inc()
        if code >= 400:
            self.errors.labels(route, str(code)).inc()
        self.latency.labels(route).observe(seconds)

    def observe_batch(self, info: BatchInfo) -> None:
        self.batches.inc()
        self.batch_requests.observe(info.requests)
        self.batch_texts.observe(info.texts)
        self.batch_tokens.observe(info.padded_tokens)
        self.batch_seconds.observe(info.seconds)
        self.tokens.inc(info.tokens)

    def render(self) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self.registry), CONTENT_TYPE_LATEST


class _CacheCollector:
    """Hits, lookups and hit rate of each cache, read from the caches themselves at scrape time."""

    def __init__(self, cache_stats: Callable[[], dict[str, dict[str, Any]]]) -> None:
        self.cache_stats = cache_stats

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        hits = CounterMetricFamily("subspaces_cache_hits", "Cache hits", labels=["cache"])
        lookups = CounterMetricFamily("subspaces_cache_lookups", "Cache lookups", labels=["cache"])
        rate = GaugeMetricFamily("subspaces_cache_hit_ratio", "Hits over lookups (0 before any)", labels=["cache"])
        for name, stats in self.cache_stats().items():
            hits.add_metric([name], stats["hits"])
            lookups.add_metric([name], stats["lookups"])
            rate.add_metric([name], stats["hit_rate"] or 0.0)
        yield from (hits, lookups, rate)

    def describe(self) -> list[Any]:
        return []  # names are fixed, but their samples come only at scrape time
