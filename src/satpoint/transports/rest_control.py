"""Control calls over OIP REST (readiness, metadata, model list): stdlib HTTP, off the hot path."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from satpoint.errors import ModelNotFound, TargetUnreachable


def _request(
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 5.0,
) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method)
    for k, v in headers:
        req.add_header(k, v)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read()
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise TargetUnreachable(f"cannot reach {url}: {reason}") from None


def server_ready(base_url: str, headers: Sequence[tuple[str, str]] = ()) -> bool:
    status, _ = _request(base_url.rstrip("/") + "/v2/health/ready", headers=headers)
    return status == 200


def list_models(base_url: str, headers: Sequence[tuple[str, str]] = ()) -> list[str]:
    """Model names from MLServer's repository index (empty if the server has no such route)."""
    try:
        status, body = _request(base_url.rstrip("/") + "/v2/repository/index", "POST", b"{}", headers)
    except TargetUnreachable:
        return []
    if status != 200:
        return []
    try:
        doc = json.loads(body)
    except ValueError:
        return []
    return [str(m.get("name")) for m in doc if isinstance(m, dict) and m.get("name")]


def model_path(model: str, version: str | None) -> str:
    path = f"/v2/models/{model}"
    return path + (f"/versions/{version}" if version else "")


def model_metadata(
    base_url: str, model: str, version: str | None = None, headers: Sequence[tuple[str, str]] = ()
) -> dict[str, Any]:
    """``GET /v2/models/{model}``; a clear error naming the models the server has when not found."""
    base = base_url.rstrip("/")
    status, body = _request(base + model_path(model, version), headers=headers)
    if status == 404 or status == 400:
        known = list_models(base, headers)
        hint = f"; the server has: {', '.join(known)}" if known else ""
        raise ModelNotFound(f"model {model!r} not found at {base_url}{hint}")
    if status != 200:
        raise TargetUnreachable(f"model metadata for {model!r} failed: HTTP {status}: {body[:200]!r}")
    try:
        doc = json.loads(body)
    except ValueError:
        raise TargetUnreachable(f"model metadata for {model!r} is not JSON: {body[:200]!r}") from None
    if not isinstance(doc, dict):
        raise TargetUnreachable(f"model metadata for {model!r} is not a JSON object")
    return doc


def model_ready(base_url: str, model: str, version: str | None = None, headers: Sequence[tuple[str, str]] = ()) -> bool:
    status, _ = _request(base_url.rstrip("/") + model_path(model, version) + "/ready", headers=headers)
    return status == 200


def infer_once(
    base_url: str,
    model: str,
    body: bytes,
    version: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 30.0,
) -> tuple[int, bytes]:
    """One inference, used to check a payload before the run."""
    url = base_url.rstrip("/") + model_path(model, version) + "/infer"
    return _request(url, "POST", body, headers, timeout_s)
