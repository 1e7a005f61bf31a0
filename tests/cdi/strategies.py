"""Hypothesis strategies for CDI names and for specs that the project's validator accepts."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import TypeVar

from hypothesis import strategies as st

from cdi_plugin.cdi import model
from cdi_plugin.cdi.version import KNOWN_VERSIONS, minimum_version, version_key

T = TypeVar("T")
RELEASED = KNOWN_VERSIONS[2:]
UINT32_MAX = 2**32 - 1
INT64 = (-(2**63), 2**63 - 1)

vendors = st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,30}[A-Za-z0-9]", fullmatch=True)
classes = st.from_regex(r"[A-Za-z][A-Za-z0-9_.-]{0,20}[A-Za-z0-9]", fullmatch=True)
device_names = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.:-]{0,20}[A-Za-z0-9])?", fullmatch=True)

#: Any text a JSON string can hold (hypothesis leaves out lone surrogates).
texts = st.text(max_size=12)
absolute_paths = st.builds(lambda rest: "/" + rest, texts)
uint32 = st.integers(0, UINT32_MAX)
int64 = st.integers(*INT64)
env_entries = st.builds(
    lambda name, value: f"{name}={value}",
    st.text(
        alphabet=st.characters(exclude_characters="=", exclude_categories=["Cs"]), min_size=1, max_size=8
    ),
    texts,
)
annotation_keys = st.from_regex(
    r"([a-z0-9]([-a-z0-9]{0,8}[a-z0-9])?(\.[a-z0-9]{1,8}){0,2}/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,10}[A-Za-z0-9])?",
    fullmatch=True,
)


def _opt(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T | None]:
    return st.none() | strategy


def _tuple_of(strategy: st.SearchStrategy[T], max_size: int = 3) -> st.SearchStrategy[tuple[T, ...]]:
    return st.lists(strategy, max_size=max_size).map(tuple)


annotation_maps = _opt(st.dictionaries(annotation_keys, texts, max_size=3).map(MappingProxyType))

device_nodes = st.builds(
    model.DeviceNode,
    path=absolute_paths,
    host_path=_opt(absolute_paths),
    type=_opt(st.sampled_from(["b", "c", "u", "p"])),
    major=_opt(int64),
    minor=_opt(int64),
    file_mode=_opt(uint32),
    permissions=_opt(st.from_regex(r"none|[rwm]{1,3}", fullmatch=True)),
    uid=_opt(uint32),
    gid=_opt(uint32),
)
mounts = st.builds(
    model.Mount,
    host_path=st.text(min_size=1, max_size=12),
    container_path=absolute_paths,
    options=_opt(_tuple_of(texts)),
    type=_opt(st.text(min_size=1, max_size=8)),
)
hooks = st.builds(
    model.Hook,
    hook_name=st.sampled_from(
        ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"]
    ),
    path=absolute_paths,
    args=_opt(_tuple_of(texts)),
    env=_opt(_tuple_of(env_entries)),
    timeout=_opt(st.integers(1, UINT32_MAX)),
)
clos_ids = st.just("/") | st.text(
    alphabet=st.characters(exclude_characters="/\n", exclude_categories=["Cs"]), min_size=1, max_size=16
).filter(lambda s: s not in {".", ".."})
legacy_rdt = st.builds(  # the 0.7.0 to 1.0.0 shape
    model.IntelRdt,
    clos_id=_opt(clos_ids),
    l3_cache_schema=_opt(texts),
    mem_bw_schema=_opt(texts),
    enable_cmt=_opt(st.booleans()),
    enable_mbm=_opt(st.booleans()),
)
current_rdt = st.builds(  # the 1.1.0 shape
    model.IntelRdt,
    clos_id=_opt(clos_ids),
    l3_cache_schema=_opt(texts),
    mem_bw_schema=_opt(texts),
    schemata=_opt(_tuple_of(texts)),
    enable_monitoring=_opt(st.booleans()),
)


@st.composite
def net_devices(draw: st.DrawFn) -> tuple[model.NetDevice, ...]:
    """Host and container interface names are each unique within one list."""
    names = st.text(min_size=1, max_size=8)
    hosts = draw(st.lists(names, max_size=3, unique=True))
    inside = draw(st.lists(names, min_size=len(hosts), max_size=len(hosts), unique=True))
    return tuple(model.NetDevice(host_interface_name=h, name=n) for h, n in zip(hosts, inside, strict=True))


def container_edits(legacy: bool) -> st.SearchStrategy[model.ContainerEdits]:
    """Edits of the 1.1.0 shape, or (``legacy``) of the 0.7.0 to 1.0.0 one: enableCMT/enableMBM
    and no 1.1.0 feature."""
    return st.builds(
        model.ContainerEdits,
        env=_opt(_tuple_of(env_entries)),
        device_nodes=_opt(_tuple_of(device_nodes)),
        net_devices=st.none() if legacy else _opt(net_devices()),
        hooks=_opt(_tuple_of(hooks, 2)),
        mounts=_opt(_tuple_of(mounts, 2)),
        intel_rdt=_opt(legacy_rdt if legacy else current_rdt),
        additional_gids=_opt(_tuple_of(uint32)),
    )


@st.composite
def specs(draw: st.DrawFn) -> model.Spec:
    """A spec the project's validator accepts, with every optional field sometimes absent,
    sometimes present but empty (empty lists, zeros), sometimes set."""
    legacy = draw(st.booleans())
    names = draw(st.lists(device_names, min_size=1, max_size=3, unique=True))
    devices = tuple(
        model.Device(
            name=name,
            container_edits=draw(container_edits(legacy).filter(lambda e: not e.is_empty())),
            annotations=draw(annotation_maps),
        )
        for name in names
    )
    spec = model.Spec(
        cdi_version="0.3.0",
        kind=f"{draw(vendors)}/{draw(classes)}",
        devices=devices,
        annotations=draw(annotation_maps),
        container_edits=draw(_opt(container_edits(legacy))),
    )
    lowest = version_key(minimum_version(spec))
    uses_cmt = any(
        e.intel_rdt is not None and (e.intel_rdt.enable_cmt is not None or e.intel_rdt.enable_mbm is not None)
        for _, e in spec.all_edits()
    )
    highest = version_key("1.0.0") if uses_cmt else len(KNOWN_VERSIONS) - 1
    version = draw(st.sampled_from(KNOWN_VERSIONS[lowest : highest + 1]))
    return replace(spec, cdi_version=version)
