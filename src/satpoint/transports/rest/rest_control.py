"""Control calls over OIP REST (readiness, metadata, model list): stdlib HTTP, off the hot path.

``base_url`` is ``http[s]://host[:port][/prefix][?query]``: paths go after the prefix and the query
(e.g. a gateway's ``?token=``) is kept on every call; userinfo is never sent as part of the URL (the
caller turns it into an ``Authorization`` header, see ``endpoints.spec.Target.wire_headers``).  ``tls``
sets up ``https://`` (verification, CA, client certificate).  Errors name the URL redacted.

Like the load, control calls go straight to the target: no proxy from ``http_proxy``/``https_proxy`` and
no redirect followed (a 3xx answer is an error naming its ``Location``), so the headers, ``Authorization``
included, reach nobody but the target.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from satpoint.errors import ModelNotFound, TargetUnreachable
from satpoint.redact import redact_url
from satpoint.transports.control_call import Inference
from satpoint.transports.tls import TlsOptions, explain_tls_error


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A 3xx answer is returned as it is (an ``HTTPError``), never followed: following one would send the
    request's headers, ``Authorization`` included, to whatever host the ``Location`` names."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _opener(context: ssl.SSLContext | None) -> urllib.request.OpenerDirector:
    handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({}), _NoRedirect()]
    if context is not None:
        handlers.append(urllib.request.HTTPSHandler(context=context))
    return urllib.request.build_opener(*handlers)


def _redirect_error(url: str, status: int, location: str | None) -> TargetUnreachable:
    where = f" to {redact_url(location)}" if location else " (no Location)"
    return TargetUnreachable(
        f"{redact_url(url)} answered HTTP {status}, a redirect{where}: satpoint does not follow redirects "
        "(the request's headers would go to another address); give the final URL with --url"
    )


def endpoint_url(base_url: str, path: str) -> str:
    """``base_url`` + ``path`` after its path prefix, keeping its query, without its userinfo."""
    parts = urlsplit(base_url if "://" in base_url else "http://" + base_url)
    netloc = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, netloc, parts.path.rstrip("/") + path, parts.query, ""))


def _request(
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 5.0,
    tls: TlsOptions | None = None,
) -> tuple[int, bytes]:
    req = urllib.request.Request(url, data=body, method=method)
    for k, v in headers:
        req.add_header(k, v)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    context: ssl.SSLContext | None = None
    if url.startswith("https:"):
        try:
            context = (tls or TlsOptions()).context()
        except (OSError, ssl.SSLError) as e:
            raise TargetUnreachable(f"cannot set up TLS for {redact_url(url)}: {e}") from None
    try:
        try:
            with _opener(context).open(req, timeout=timeout_s) as resp:
                return int(resp.status), resp.read()
        except urllib.error.HTTPError as e:
            if 300 <= e.code < 400:
                location = e.headers.get("Location") if e.headers is not None else None
                e.close()
                raise _redirect_error(url, e.code, location) from None
            return int(e.code), e.read()
    except (urllib.error.URLError, OSError) as e:
        reason = explain_tls_error(e, (tls or TlsOptions()) if context is not None else None)
        if reason is None:
            reason = str(getattr(e, "reason", e))
        raise TargetUnreachable(f"cannot reach {redact_url(url)}: {reason}") from None
    except http.client.HTTPException as e:  # a response cut short (IncompleteRead) or not HTTP (BadStatusLine)
        raise TargetUnreachable(f"{redact_url(url)} answered with a broken response: {e!r}") from None


def server_live(base_url: str, headers: Sequence[tuple[str, str]] = (), *, tls: TlsOptions | None = None) -> bool:
    status, _ = _request(endpoint_url(base_url, "/v2/health/live"), headers=headers, tls=tls)
    return status == 200


def server_ready(base_url: str, headers: Sequence[tuple[str, str]] = (), *, tls: TlsOptions | None = None) -> bool:
    status, _ = _request(endpoint_url(base_url, "/v2/health/ready"), headers=headers, tls=tls)
    return status == 200


def list_models(base_url: str, headers: Sequence[tuple[str, str]] = (), *, tls: TlsOptions | None = None) -> list[str]:
    """Model names from MLServer's repository index (empty if the server has no such route)."""
    try:
        status, body = _request(endpoint_url(base_url, "/v2/repository/index"), "POST", b"{}", headers, tls=tls)
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
    base_url: str,
    model: str,
    version: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    *,
    tls: TlsOptions | None = None,
) -> dict[str, Any]:
    """``GET /v2/models/{model}``; a clear error naming the models the server has when not found."""
    status, body = _request(endpoint_url(base_url, model_path(model, version)), headers=headers, tls=tls)
    if status == 404 or status == 400:
        known = list_models(base_url, headers, tls=tls)
        hint = f"; the server has: {', '.join(known)}" if known else ""
        raise ModelNotFound(f"model {model!r} not found at {redact_url(base_url)}{hint}")
    if status != 200:
        raise TargetUnreachable(f"model metadata for {model!r} failed: HTTP {status}: {body[:200]!r}")
    try:
        doc = json.loads(body)
    except ValueError:
        raise TargetUnreachable(f"model metadata for {model!r} is not JSON: {body[:200]!r}") from None
    if not isinstance(doc, dict):
        raise TargetUnreachable(f"model metadata for {model!r} is not a JSON object")
    return doc


def model_ready(
    base_url: str,
    model: str,
    version: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    *,
    tls: TlsOptions | None = None,
) -> bool:
    status, _ = _request(endpoint_url(base_url, model_path(model, version) + "/ready"), headers=headers, tls=tls)
    return status == 200


def infer_once(
    base_url: str,
    model: str,
    body: bytes,
    version: str | None = None,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 30.0,
    *,
    tls: TlsOptions | None = None,
    route: str = "infer",
) -> tuple[int, bytes]:
    """One inference, used to check a payload before the run (``route``: ``infer_stream`` reads a whole stream)."""
    url = endpoint_url(base_url, model_path(model, version) + "/" + route)
    return _request(url, "POST", body, headers, timeout_s, tls=tls)


def call_json(
    base_url: str,
    path: str,
    doc: object | None = None,
    headers: Sequence[tuple[str, str]] = (),
    timeout_s: float = 5.0,
    *,
    tls: TlsOptions | None = None,
) -> tuple[int, Any]:
    """``GET`` (``doc`` None) or ``POST`` a JSON document to ``path``; the status and the parsed answer
    (None when the answer is empty or not JSON)."""
    body = None if doc is None else json.dumps(doc).encode()
    status, raw = _request(
        endpoint_url(base_url, path), "GET" if doc is None else "POST", body, headers, timeout_s, tls
    )
    try:
        parsed: Any = json.loads(raw) if raw.strip() else None
    except ValueError:
        parsed = None
    return status, parsed


def timed_infers(
    base_url: str,
    call: Inference,
    count: int,
    headers: Sequence[tuple[str, str]] = (),
    *,
    tls: TlsOptions | None = None,
    give_up_after_s: float | None = None,
) -> list[float]:
    """Seconds each of ``count`` sequential successful inferences took over one kept-alive connection,
    after one that opens it and is not counted: the answers on a connection already open (what the load
    sees), or, when the server closes every connection, the answers that opened theirs.  Requests slower
    than ``call.timeout_s`` count as failed; after ``give_up_after_s``, three answers are enough.  Empty when
    the connection cannot be set up."""
    parts = urlsplit(endpoint_url(base_url, model_path(call.model, call.version) + "/infer"))
    timeout_s = call.timeout_s
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    sent = dict(headers)
    sent["Content-Type"] = "application/json"
    conn: http.client.HTTPConnection
    try:
        if parts.scheme == "https":
            context = (tls or TlsOptions()).context()
            conn = http.client.HTTPSConnection(parts.netloc, timeout=timeout_s, context=context)
        else:
            conn = http.client.HTTPConnection(parts.netloc, timeout=timeout_s)
    except (OSError, ssl.SSLError):
        return []
    warm: list[float] = []  # answers on a connection already open: what the load sees
    cold: list[float] = []  # answers that opened their connection (only these when the server closes each one)
    t0 = time.perf_counter()
    try:
        for _ in range(count + 1):
            t = time.perf_counter()
            if give_up_after_s is not None and len(warm) + len(cold) > 3 and t - t0 > give_up_after_s:
                break
            reused = conn.sock is not None
            try:
                conn.request("POST", path, call.body, sent)
                resp = conn.getresponse()
                resp.read()
            except (OSError, http.client.HTTPException):
                conn.close()  # reopened by the next request; this one is not counted
                continue
            if resp.status == 200:
                (warm if reused else cold).append(time.perf_counter() - t)
            if resp.will_close:
                conn.close()
    finally:
        conn.close()
    return warm or cold
