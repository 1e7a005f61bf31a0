"""Names the Kubernetes API checks: the driver, the node (and pool), each device's name, and the
names of a claim the kubelet asks for.

A device's name in a ResourceSlice is a DNS label derived from its fully-qualified CDI name
(``vendor/class=name``): the class and name, lower-cased, every run of other characters turned
into one ``-``. The vendor is left out (a node usually has one), so the name stays readable.
Names that would collide, or that had to be cut to 63 characters, end in ``-`` and the first
8 hex digits of the SHA-256 of the CDI name, so the result depends only on the set of CDI names:
the same devices get the same names after every restart.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

from cdi_plugin.cdi.names import SHORT_HASH_LEN, parse_qualified_name, short_hash
from cdi_plugin.errors import CdiPluginError
from cdi_plugin.wording import shown

#: The driver's name unless told otherwise, and the kubelet's directories where it looks for plugins.
DEFAULT_DRIVER = "cdi-plugin.io"
DEFAULT_REGISTRY_DIR = Path("/var/lib/kubelet/plugins_registry")
DEFAULT_PLUGINS_DIR = Path("/var/lib/kubelet/plugins")

LABEL_MAX = 63
SUBDOMAIN_MAX = 253
DRIVER_MAX = 63
UID_MAX = 128
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
#: A UID as the API server makes them (a UUID), or as tests and other servers do: no separators,
#: spaces or controls, so that it is safe as a key, in a file and in a message.
_UID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class DraConfigError(CdiPluginError):
    """A driver or node name the Kubernetes API would refuse."""


def is_dns_label(value: str) -> bool:
    return len(value) <= LABEL_MAX and _LABEL.fullmatch(value) is not None


def is_dns_subdomain(value: str, limit: int = SUBDOMAIN_MAX) -> bool:
    return 0 < len(value) <= limit and all(_LABEL.fullmatch(part) for part in value.split("."))


def is_pool_name(value: str) -> bool:
    """A pool name: DNS subdomains joined by ``/``, at most 253 characters in all."""
    return 0 < len(value) <= SUBDOMAIN_MAX and all(is_dns_subdomain(part) for part in value.split("/"))


def is_request_name(value: str) -> bool:
    """A request of a claim, or one of its subrequests (``main/sub``): DNS labels."""
    parts = value.split("/")
    return len(parts) <= 2 and all(is_dns_label(part) for part in parts)


def claim_name_problem(namespace: str, name: str) -> str | None:
    """Why no claim can have this namespace and name, or None.

    The namespace must be a DNS label and the name a DNS subdomain, as the API server requires of
    every claim it stores, so neither can change the path of a request it goes into.
    """
    if not is_dns_label(namespace):
        return f"namespace {shown(namespace)}: not a DNS label of at most {LABEL_MAX} characters"
    if not is_dns_subdomain(name):
        return f"name {shown(name)}: not a DNS subdomain of at most {SUBDOMAIN_MAX} characters"
    return None


def claim_ref_problem(namespace: str, name: str, uid: str) -> str | None:
    """Why a claim the kubelet names cannot be prepared (its names or UID), or None."""
    problem = claim_name_problem(namespace, name)
    if problem is not None:
        return problem
    if len(uid) > UID_MAX or not _UID.fullmatch(uid):
        return f"UID {shown(uid)}: not a UID (letters, digits, '-', '.' and '_', at most {UID_MAX})"
    return None


def check_driver_name(name: str) -> str:
    """The driver name, or DraConfigError saying why the API would refuse it."""
    if not name:
        raise DraConfigError("driver name: empty")
    if len(name) > DRIVER_MAX:
        raise DraConfigError(f"driver name {name!r}: {len(name)} characters, at most {DRIVER_MAX}")
    if not is_dns_subdomain(name):
        raise DraConfigError(
            f"driver name {name!r}: not a DNS subdomain (lower-case letters, digits, '-' and '.', "
            "each dot-separated part starting and ending with a letter or digit)"
        )
    return name


def check_node_name(name: str) -> str:
    """The node name (also the pool name), or DraConfigError saying why it cannot be one."""
    if not name:
        raise DraConfigError("node name: empty (set it from the downward API: spec.nodeName)")
    if not is_dns_subdomain(name):
        raise DraConfigError(f"node name {name!r}: not a DNS subdomain of at most {SUBDOMAIN_MAX} characters")
    return name


def _base(cdi_name: str) -> str:
    qualified = parse_qualified_name(cdi_name)
    raw = f"{qualified.class_}-{qualified.name}".lower()
    return re.sub(r"[^a-z0-9]+", "-", raw).strip("-") or "device"


def _hashed(base: str, cdi_name: str) -> str:
    head = base[: LABEL_MAX - SHORT_HASH_LEN - 1].rstrip("-")
    return f"{head}-{short_hash(cdi_name)}" if head else short_hash(cdi_name)


def device_names(cdi_names: Iterable[str]) -> dict[str, str]:
    """A unique DNS label per fully-qualified CDI name (see the module docstring)."""
    bases = {n: _base(n) for n in sorted(set(cdi_names))}
    counts: dict[str, int] = {}
    for base in bases.values():
        counts[base] = counts.get(base, 0) + 1
    names = {
        n: base if counts[base] == 1 and len(base) <= LABEL_MAX else _hashed(base, n)
        for n, base in bases.items()
    }
    taken = {name: n for n, name in names.items() if counts[bases[n]] == 1}
    for n, name in names.items():
        if taken.get(name, n) != n:  # a hashed name equal to another device's plain name
            names[n] = short_hash(n) + "-" + short_hash(n + "/")
    return names
