"""ApiVersions (key 18): the APIs of :data:`broker.kafka.apis.API_TABLE` with their version ranges.

A request at a version this broker does not know is answered at v0 with UNSUPPORTED_VERSION and the
same list (Kafka's rule, so that a newer client can pick a version both know).
"""

from __future__ import annotations

from typing import Any

from broker.kafka.api import Api, Request
from broker.kafka.codec import build, response_class

API_KEY = 18


def _keys(table: dict[int, Api]) -> list[dict[str, int]]:
    return [dict(api_key=a.key, min_version=a.min_version, max_version=a.max_version) for _, a in sorted(table.items())]


def handle(request: Request, table: dict[int, Api]) -> Any:
    """ApiVersions: ``table`` is the listener's API table (``broker.kafka.apis`` binds it)."""
    body = request.body
    if request.version >= 3:
        request.session.client_software = f"{body.client_software_name}/{body.client_software_version}"
    return build(response_class(API_KEY, request.version), error_code=0, api_keys=_keys(table), throttle_time=0)


def unsupported_version(table: dict[int, Api]) -> Any:
    return build(response_class(API_KEY, 0), error_code="UNSUPPORTED_VERSION", api_keys=_keys(table))
