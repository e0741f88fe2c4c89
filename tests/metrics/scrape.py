"""Scraping a node's ``/metrics`` in tests: the Prometheus text format parsed by prometheus-client's parser
(which also checks that the exposition is well formed)."""

from __future__ import annotations

import urllib.request
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(address: str, timeout_s: float = 10.0) -> Samples:
    """Every sample at ``http://address/metrics``: ``{(name, frozenset(labels.items())): value}``."""
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=timeout_s) as answer:  # noqa: S310
        text = answer.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return samples


def value(samples: Samples, name: str, labels: Mapping[str, str] | None = None, default: float | None = None) -> float:
    """The sample ``name{labels}``; ``default`` when absent (else KeyError naming it)."""
    key = (name, frozenset((labels or {}).items()))
    if key not in samples:
        if default is not None:
            return default
        raise KeyError(f"no sample {name}{dict(labels or {})} in the scrape")
    return samples[key]


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum of every ``name`` sample whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples.items() if n == name and wanted <= ls)
