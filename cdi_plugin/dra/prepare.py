"""A claim's allocation to the devices the kubelet hands to the runtime, by CDI name.

Pure: the claim object (as the API server returns it, or ``None`` when it is gone) and the
devices served now in, per claim either the prepared devices or a :class:`Refusal`: one line
saying which device failed and why, and the cause the metrics count. The claim is read through
:func:`shapes.claim_results`: a field the driver needs that is missing, mistyped or not a name the
API allows makes the claim fail, never the call. A claim that could not be read at all is a
:class:`ClaimReadError` of whoever reads it (:mod:`~cdi_plugin.dra.kube`), here so that the API
server side and the kubelet side share it without importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from cdi_plugin.dra.inventory import ServedDevice
from cdi_plugin.dra.names import UID_MAX, device_names
from cdi_plugin.dra.report import PrepareResult
from cdi_plugin.dra.shapes import BadAnswer, claim_results
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.wording import escape_controls


@dataclass(frozen=True, slots=True)
class Claim:
    """A claim as the kubelet names it in a request (either API version)."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One allocated device of a prepared claim, as the kubelet receives it."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    admin_access: bool = False  # kept by the driver, not sent: such a device may be shared


class ClaimReadError(CdiPluginError):
    """A ResourceClaim could not be read (the API server is down, refused, or kept failing)."""


class Refusal(str):
    """Why a claim is not prepared: the message the kubelet shows, with its :attr:`cause`."""

    cause: PrepareResult

    def __new__(cls, message: str, cause: PrepareResult) -> Refusal:
        refusal = super().__new__(cls, message)
        refusal.cause = cause
        return refusal


def by_device_name(devices: Mapping[str, ServedDevice]) -> dict[str, ServedDevice]:
    """The served devices by their name in the pool (the names :mod:`slices` publishes)."""
    names = device_names(devices)
    return {names[cdi]: d for cdi, d in devices.items()}


def prepare_claim(
    ref: Claim,
    claim: Mapping[str, Any] | None,
    *,
    driver: str,
    pool: str,
    served: Mapping[str, ServedDevice],
    in_use: Mapping[tuple[str, str], str] = MappingProxyType({}),
    problem: Callable[[str], str | None] = lambda cdi_name: None,
) -> tuple[PreparedDevice, ...] | Refusal:
    """The prepared devices of ``claim``, or why it cannot be prepared.

    ``in_use`` maps (pool, device) to the UID of the claim it is prepared for, without admin
    access; such a device is refused to another claim unless this one has admin access.
    ``served`` holds the devices served now by their name in the pool (:func:`by_device_name`);
    ``problem(cdi_name)`` says why a device must not be handed out now (the inventory's last check).
    """
    where = f"claim {ref.namespace}/{ref.name}"
    if claim is None:
        return Refusal(f"{where}: not found in the API server (deleted after allocation?)", "not-found")
    try:
        uid, results = claim_results(claim, ref.namespace, ref.name, driver)
    except BadAnswer as exc:
        return Refusal(f"{where}: the API server's answer is not a usable claim: {exc}", "invalid-claim")
    if uid != ref.uid:
        found_uid = escape_controls(uid[:UID_MAX])
        replaced = f"UID {found_uid} in the API server, {ref.uid} requested (the claim was replaced)"
        return Refusal(f"{where}: {replaced}", "invalid-claim")
    if results is None:
        return Refusal(f"{where}: not allocated", "invalid-claim")
    if not results:
        return Refusal(f"{where}: no device allocated by driver {driver}", "invalid-claim")
    requests: dict[tuple[str, str], list[str]] = {}
    admin: dict[tuple[str, str], bool] = {}
    for result in results:
        key = (result.pool, result.device)
        device = f"device {key[0]}/{key[1]}"
        if key[0] != pool:
            return Refusal(
                f"{where}: {device}: pool {key[0]} is not this node's pool {pool}", "invalid-claim"
            )
        found = served.get(key[1])
        if found is None:
            gone = f"{where}: {device}: not served by driver {driver} on this node (removed?)"
            return Refusal(gone, "device-unavailable")
        if not found.healthy:
            unhealthy = f"unhealthy: {found.reason or 'no reason given'}"
            return Refusal(f"{where}: {device} ({found.cdi_name}): {unhealthy}", "device-unavailable")
        why = problem(found.cdi_name)
        if why is not None:
            return Refusal(f"{where}: {device} ({found.cdi_name}): {why}", "device-unavailable")
        admin[key] = admin.get(key, True) and result.admin_access
        holder = in_use.get(key, ref.uid)
        if holder != ref.uid and not admin[key]:
            in_use_by = f"already prepared for claim {holder}"
            return Refusal(f"{where}: {device} ({found.cdi_name}): {in_use_by}", "device-in-use")
        base = result.request.partition("/")[0]
        names = requests.setdefault(key, [])
        if base not in names:
            names.append(base)
    return tuple(
        PreparedDevice(tuple(names), p, d, (served[d].cdi_name,), admin[p, d])
        for (p, d), names in requests.items()
    )
