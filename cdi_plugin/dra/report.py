"""What the DRA driver reports as it works, for metrics and readiness: a protocol of its own, so
that the driver imports no metrics library (``cdi_plugin.metrics.dra`` implements it with
Prometheus metrics when ``serve`` exports them; :data:`UNREPORTED` otherwise).

Every label is one of a few fixed values (no claim, namespace, path or message), so the metrics'
series are bounded whatever the node or the API server does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, Protocol

#: Per claim of a NodePrepareResources call. ``ok``: prepared (or prepared already);
#: ``not-found``: no such claim in the API server; ``invalid-claim``: its names, UID, allocation
#: or shape do not fit this driver and node; ``device-unavailable``: a device not served, or
#: unhealthy; ``device-in-use``: prepared for another claim; ``api-error``: the claim could not be
#: read; ``state-error``: the prepared claims' file cannot be used or written; ``lock-error``: the
#: lock shared with the other instances could not be taken.
PrepareResult = Literal[
    "ok", "not-found", "invalid-claim", "device-unavailable", "device-in-use", "api-error", "state-error",
    "lock-error",
]  # fmt: skip
UnprepareResult = Literal["ok", "state-error", "lock-error"]
#: A pass of the publisher: slices written, nothing to write, or a failure.
PublishResult = Literal["changed", "unchanged", "failed"]
ApiVerb = Literal["get", "list", "watch", "create", "update", "delete", "other"]
#: ``ok``: a 2xx JSON answer (a watch: ended by the server or the driver, not by an error); a
#: status code the driver meets for a reason of its own; ``4xx``, ``5xx``: any other; ``timeout``:
#: no complete answer in time, or a silent watch; ``connection-error``: no connection, one broken,
#: or no credentials to send it with; ``bad-answer``: not an answer of the Kubernetes API (an HTML
#: page, garbage, too large).
ApiResult = Literal[
    "ok", "400", "401", "403", "404", "409", "410", "422", "429", "4xx", "5xx", "timeout",
    "connection-error", "bad-answer",
]  # fmt: skip

_VERBS: dict[str, ApiVerb] = {"GET": "get", "POST": "create", "PUT": "update", "DELETE": "delete"}
_CODES: dict[int, ApiResult] = {
    400: "400", 401: "401", 403: "403", 404: "404", 409: "409", 410: "410", 422: "422", 429: "429",
}  # fmt: skip


def verb_of(method: str) -> ApiVerb:
    """The verb of a request by its HTTP method (a GET of one object; a list says so itself)."""
    return _VERBS.get(method, "other")


def result_of_code(code: int) -> ApiResult:
    """The result of an answer with HTTP status ``code`` (not 2xx)."""
    if code in _CODES:
        return _CODES[code]
    if 400 <= code < 500:
        return "4xx"
    return "5xx" if 500 <= code < 600 else "bad-answer"


class Report(Protocol):
    """Called on the driver's event loop; each call is cheap and never fails."""

    def serving(self, yes: bool) -> None:
        """Whether the driver is started: not while the API server serves no DRA (with ``--api
        both``), so that readiness does not wait for it then."""
        ...

    def prepare(self, results: Iterable[PrepareResult], seconds: float) -> None:
        """A NodePrepareResources call answered after ``seconds``, with each claim's result."""
        ...

    def unprepare(self, results: Iterable[UnprepareResult], seconds: float) -> None: ...

    def claims_prepared(self, count: int) -> None:
        """The claims prepared on the node, as the shared file read or written last holds them."""
        ...

    def registered(self, yes: bool, why: str = "") -> None:
        """The kubelet registered the driver (or refused it, or its sockets were served anew)."""
        ...

    def published(self, result: PublishResult, why: str = "") -> None:
        """A pass of the publisher: the stored slices now match the pool, or ``why`` they do not."""
        ...

    def api_request(self, verb: ApiVerb, result: ApiResult) -> None: ...

    def devices(self, health: Mapping[str, Sequence[bool]]) -> None:
        """The health (True: healthy) of every device the driver publishes, by kind; kinds not
        given have none."""
        ...


class _Unreported:
    def serving(self, yes: bool) -> None:
        pass

    def prepare(self, results: Iterable[PrepareResult], seconds: float) -> None:
        pass

    def unprepare(self, results: Iterable[UnprepareResult], seconds: float) -> None:
        pass

    def claims_prepared(self, count: int) -> None:
        pass

    def registered(self, yes: bool, why: str = "") -> None:
        pass

    def published(self, result: PublishResult, why: str = "") -> None:
        pass

    def api_request(self, verb: ApiVerb, result: ApiResult) -> None:
        pass

    def devices(self, health: Mapping[str, Sequence[bool]]) -> None:
        pass


#: Reports nothing (``serve`` without ``--metrics-address``, and the driver's parts in tests).
UNREPORTED: Report = _Unreported()
