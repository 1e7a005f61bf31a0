"""Requests to the API server, and their answers read as untrusted input.

lightkube does what it does well: credentials (in-cluster service account with its rotating token,
``$KUBECONFIG``, ``~/.kube/config``, exec plugins), TLS and authentication, on the httpx2 client it
builds. Every request goes out on that client from here, and lightkube's parsing and models are
never used: an answer is read streaming, up to :data:`MAX_BODY` bytes and within a deadline,
decoded and shape-checked by :mod:`cdi_plugin.dra.shapes`, and handed on as plain dicts. Whatever
comes back (an HTML page of a load balancer, garbage, a body without end, a connection that goes
silent) becomes an :class:`ApiServerError` naming the request and the reason, in one line.
Every request is counted here, by verb and result, in the client's
:class:`~cdi_plugin.dra.report.Report` (a watch when it ends).

The only module that imports lightkube and httpx2; only the DRA driver imports it, so the device
plugin alone never loads them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from pathlib import Path

import httpx2
import yaml
from lightkube import ConfigError, KubeConfig
from lightkube.config.client_adapter import AsyncClient, ConnectionParams

from cdi_plugin import __version__
from cdi_plugin.dra.names import DraConfigError
from cdi_plugin.dra.report import UNREPORTED, ApiResult, ApiVerb, Report, result_of_code, verb_of
from cdi_plugin.dra.shapes import BadAnswer, Obj, Status, decode_object, retry_after, status_of, watch_event
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.wording import clipped

#: The largest answer read (an object, a list, one watch event). The API server stores objects
#: of at most 1.5 MiB (etcd's limit); a larger answer is not one it sends.
MAX_BODY = 4 << 20
#: What is read of an error's body (a Status is a few hundred bytes; a proxy's page is cut).
MAX_ERROR_BODY = 64 << 10
CONNECT_TIMEOUT = 5.0
#: A request's whole answer, headers to the last byte, must come within this.
REQUEST_TIMEOUT = 10.0
HEADERS = {
    "Accept": "application/json",
    "Accept-Encoding": "identity",  # nothing to inflate: a compressed bomb cannot grow past the bound
    "User-Agent": f"cdi-plugin/{__version__}",
}
#: Status codes worth another attempt: throttling and server errors.
RETRYABLE = frozenset({429, 500, 502, 503, 504})


class ApiServerError(CdiPluginError):
    """A request that failed: refused by the API server, not answered, or answered with something
    that is not an answer of the Kubernetes API. ``code`` and ``reason`` are the Status's, when
    the API server sent one; ``retryable`` says whether trying again may help; ``refused`` that
    the request was refused as it is (a Status that is not ``retryable``, or any other answer of
    a 4xx status but 408 and 429: a proxy's page); ``version_too_large`` that the version asked for
    is newer than the server has seen; ``retry_after`` the seconds the server asked to wait before
    the next attempt (``Retry-After``, else a Status's ``details.retryAfterSeconds``, with an
    answer worth another attempt: 429, 500, 502, 503, 504); ``result`` is how the request is
    counted (by default from ``code``, else an answer that is not one)."""

    def __init__(
        self,
        request: str,
        problem: str,
        *,
        code: int | None = None,
        reason: str = "",
        retryable: bool = True,
        refused: bool | None = None,
        version_too_large: bool = False,
        retry_after: float | None = None,
        result: ApiResult | None = None,
    ) -> None:
        super().__init__(f"{request}: {problem}")
        self.code, self.reason, self.retryable = code, reason, retryable
        self.refused = code is not None and not retryable if refused is None else refused
        self.version_too_large = version_too_large
        self.retry_after = retry_after
        self.result: ApiResult = result or (result_of_code(code) if code is not None else "bad-answer")


def _first_line(exc: Exception) -> str:
    """The exception's first line, escaped and cut (h11 quotes up to 16 KiB of what it refused)."""
    return clipped(str(exc).splitlines()[0], 200) if str(exc).strip() else ""


def _transport(exc: Exception) -> str:
    return f"{type(exc).__name__}: {_first_line(exc)}".removesuffix(": ")


class _NoCredentials(CdiPluginError):
    """lightkube's authentication failed while a request was being sent."""


class _Credentials(httpx2.Auth):
    """lightkube's authentication, whatever it fails with (an exec plugin that fails or prints no
    credential, a token file, the service account's, gone or unreadable when read again after a
    401) raising :class:`_NoCredentials`, which only that can raise."""

    def __init__(self, auth: httpx2.Auth) -> None:
        self.auth = auth
        self.requires_request_body = auth.requires_request_body
        self.requires_response_body = auth.requires_response_body

    async def async_auth_flow(
        self, request: httpx2.Request
    ) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        flow = self.auth.async_auth_flow(request)
        try:
            request = await anext(flow)
            while True:
                response = yield request
                request = await flow.asend(response)
        except StopAsyncIteration:
            return
        except Exception as exc:
            raise _NoCredentials(_transport(exc)) from exc
        finally:
            await flow.aclose()


def _no_credentials(what: str, exc: _NoCredentials) -> ApiServerError:
    """The request not sent: no credentials to send it with (they may come back: retryable)."""
    return ApiServerError(what, f"no credentials: {exc}", result="connection-error")


class _TooBig(CdiPluginError):
    """An answer passed its size bound (reading stopped there)."""


async def _body(response: httpx2.Response, limit: int) -> bytes:
    """The raw body, or _TooBig as soon as it passes ``limit`` bytes."""
    declared = response.headers.get("Content-Length", "")
    if declared.isdigit() and int(declared) > limit:
        raise _TooBig
    data = bytearray()
    async for chunk in response.aiter_raw():
        data += chunk
        if len(data) > limit:
            raise _TooBig
    return bytes(data)


async def _failure(what: str, response: httpx2.Response) -> ApiServerError:
    """The error a non-2xx answer stands for: its Status when it is one, else what it is."""
    code = response.status_code
    header = retry_after(response.headers.get_list("Retry-After"), time.time())
    try:
        status = status_of(decode_object(await _body(response, MAX_ERROR_BODY)))
    except (_TooBig, BadAnswer, httpx2.HTTPError):
        status = None
    if status is None:
        kind = clipped(response.headers.get("Content-Type", "no content type").split(";")[0], 60)
        problem = f"{code} {clipped(response.reason_phrase, 60)} ({kind}, not a Status)"
        refused = 400 <= code < 500 and code not in (408, 429)
        wait = header if code in RETRYABLE else None
        return ApiServerError(what, problem, refused=refused, retry_after=wait, result=result_of_code(code))
    retryable = code in RETRYABLE or status.code in RETRYABLE
    return _status_error(what, status, retryable, result_of_code(code), header)


def _status_error(
    what: str, status: Status, retryable: bool, result: ApiResult, header: float | None = None
) -> ApiServerError:
    """The error of a Status; the wait before the next attempt, when one is worth it, is the
    ``Retry-After`` header's, else the Status's ``details.retryAfterSeconds`` (client-go retries
    after the header's, and its callers read the Status's)."""
    wait = (status.retry_after if header is None else header) if retryable else None
    return ApiServerError(
        what, str(status), code=status.code, reason=status.reason, retryable=retryable,
        version_too_large=status.version_too_large, retry_after=wait, result=result,
    )  # fmt: skip


class RestClient:
    """Requests on lightkube's httpx2 client: JSON in, checked JSON objects out."""

    def __init__(self, http: httpx2.AsyncClient, timeout: float = REQUEST_TIMEOUT) -> None:
        self.http = http
        self.timeout = timeout  # a request's, unless it says otherwise
        self.report: Report = UNREPORTED  # where each request is counted

    @classmethod
    def connect(cls, kubeconfig: Path | None = None) -> RestClient:
        """In-cluster credentials, else ``$KUBECONFIG`` or ``~/.kube/config``; an explicit
        ``kubeconfig`` overrides them and the environment altogether (proxies included).
        DraConfigError when there are none or they are broken."""
        try:
            config = KubeConfig.from_file(kubeconfig) if kubeconfig is not None else KubeConfig.from_env()
            single = config.get()
            if single is None:
                raise ConfigError("no current context")
            params = ConnectionParams(
                timeout=httpx2.Timeout(REQUEST_TIMEOUT, connect=CONNECT_TIMEOUT), trust_env=kubeconfig is None
            )
            http = AsyncClient(single, params)
            if http.auth is not None:
                http.auth = _Credentials(http.auth)
        except (ConfigError, OSError, ValueError, KeyError, AttributeError, TypeError, yaml.YAMLError) as exc:
            where = (
                f"--kubeconfig {kubeconfig}"
                if kubeconfig is not None
                else "Kubernetes credentials (no service account, $KUBECONFIG or ~/.kube/config)"
            )
            problem = f"{exc} missing" if isinstance(exc, KeyError) else _first_line(exc)
            if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
                mark = exc.problem_mark
                problem = f"not YAML: line {mark.line + 1} column {mark.column + 1}: {exc.problem}"
            raise DraConfigError(f"{where}: {problem or type(exc).__name__}") from exc
        return cls(http)

    async def close(self) -> None:
        await self.http.aclose()

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes | None = None,
        timeout: float | None = None,
        verb: ApiVerb | None = None,
    ) -> Obj:
        """The JSON object the API server answered with (2xx); ApiServerError otherwise. Counted
        as ``verb`` (by default the method's: a GET is a get)."""
        result: ApiResult = "ok"
        try:
            return await self._request(method, path, params, body, timeout)
        except ApiServerError as exc:
            result = exc.result
            raise
        finally:
            self.report.api_request(verb or verb_of(method), result)

    async def _request(
        self,
        method: str,
        path: str,
        params: Mapping[str, str] | None,
        body: bytes | None,
        timeout: float | None,
    ) -> Obj:
        what = f"{method} {path}"
        timeout = self.timeout if timeout is None else timeout
        headers = HEADERS if body is None else {**HEADERS, "Content-Type": "application/json"}
        request = self.http.build_request(
            method, path, params=params, content=body, headers=headers,
            timeout=httpx2.Timeout(timeout, connect=min(timeout, CONNECT_TIMEOUT)),
        )  # fmt: skip
        try:
            async with asyncio.timeout(timeout):
                response = await self.http.send(request, stream=True)
                try:
                    if not 200 <= response.status_code < 300:
                        raise await _failure(what, response)
                    data = await _body(response, MAX_BODY)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx2.TimeoutException):
            raise ApiServerError(
                what, f"no complete answer within {round(timeout, 1):g} s", result="timeout"
            ) from None
        except _TooBig:
            raise ApiServerError(what, f"an answer larger than {MAX_BODY >> 20} MiB") from None
        except httpx2.HTTPError as exc:
            raise ApiServerError(what, _transport(exc), result="connection-error") from None
        except _NoCredentials as exc:
            raise _no_credentials(what, exc) from None
        try:
            return decode_object(data)
        except BadAnswer as exc:
            raise ApiServerError(what, f"{response.status_code} answer: {exc}") from None

    async def watch(
        self,
        path: str,
        params: Mapping[str, str],
        *,
        read_timeout: float,
        longest: float,
        on_start: Callable[[], None] = lambda: None,
    ) -> AsyncGenerator[tuple[str, Obj], None]:
        """The events of a watch (type and object) until the API server ends it; ``on_start()`` is
        called once the API server accepted it (200), before any event.

        ApiServerError when it cannot start, sends something that is not an event, sends nothing
        for ``read_timeout`` seconds (a silent connection), is still open after ``longest`` seconds,
        or an ERROR event (its Status's code and reason, 410 Expired among them). Close the
        iterator (``contextlib.aclosing``) when leaving it early. Counted once it ends.
        """
        result: ApiResult = "ok"
        try:
            stream = self._watch(path, params, read_timeout, longest, on_start)
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    yield event
        except ApiServerError as exc:
            result = exc.result
            raise
        finally:
            self.report.api_request("watch", result)

    async def _watch(
        self,
        path: str,
        params: Mapping[str, str],
        read_timeout: float,
        longest: float,
        on_start: Callable[[], None],
    ) -> AsyncGenerator[tuple[str, Obj], None]:
        what = f"GET {path} (watch)"
        request = self.http.build_request(
            "GET", path, params=params, headers=HEADERS,
            timeout=httpx2.Timeout(self.timeout, connect=CONNECT_TIMEOUT, read=read_timeout),
        )  # fmt: skip
        loop = asyncio.get_running_loop()
        deadline = loop.time() + longest
        try:
            async with asyncio.timeout(self.timeout):
                response = await self.http.send(request, stream=True)
                if response.status_code != 200:
                    try:
                        raise await _failure(what, response)
                    finally:
                        await response.aclose()
        except (TimeoutError, httpx2.TimeoutException):
            raise ApiServerError(what, f"no answer within {self.timeout:g} s", result="timeout") from None
        except httpx2.HTTPError as exc:
            raise ApiServerError(what, _transport(exc), result="connection-error") from None
        except _NoCredentials as exc:
            raise _no_credentials(what, exc) from None
        try:
            on_start()
            async with contextlib.aclosing(_lines(response, what, read_timeout, deadline)) as lines:
                async for line in lines:
                    try:
                        kind, obj = watch_event(decode_object(line))
                    except BadAnswer as exc:
                        raise ApiServerError(what, f"an event that is not one: {exc}") from None
                    if kind == "ERROR":
                        status = status_of(obj)
                        if status is None:
                            raise ApiServerError(what, "an ERROR event without a Status")
                        raise _status_error(
                            what, status, status.code in RETRYABLE, result_of_code(status.code)
                        )
                    yield kind, obj
        finally:
            await response.aclose()


async def _lines(
    response: httpx2.Response, what: str, read_timeout: float, deadline: float
) -> AsyncGenerator[bytes, None]:
    """The body's lines, each at most MAX_BODY bytes, each read within ``read_timeout`` seconds."""
    loop = asyncio.get_running_loop()
    chunks = response.aiter_raw()
    buffer = bytearray()
    searched = 0
    try:
        while True:
            left = deadline - loop.time()
            if left <= 0:
                raise ApiServerError(
                    what, "still open long after the timeout it was asked for", result="timeout"
                )
            try:
                async with asyncio.timeout(min(read_timeout, left) + 0.5):
                    chunk = await anext(chunks, None)
            except (TimeoutError, httpx2.TimeoutException):
                if loop.time() >= deadline:
                    continue
                raise ApiServerError(
                    what, f"nothing received for {read_timeout:g} s (a silent connection)", result="timeout"
                ) from None
            except httpx2.HTTPError as exc:
                raise ApiServerError(what, _transport(exc), result="connection-error") from None
            if chunk is None:
                if buffer.strip():
                    raise ApiServerError(what, "the stream ended in the middle of an event")
                return
            buffer += chunk
            while (end := buffer.find(b"\n", searched)) >= 0:
                line = bytes(buffer[:end])
                del buffer[: end + 1]
                searched = 0
                if line.strip():
                    yield line
            searched = len(buffer)
            if len(buffer) > MAX_BODY:
                raise ApiServerError(what, f"an event larger than {MAX_BODY >> 20} MiB")
    finally:
        await chunks.aclose()
