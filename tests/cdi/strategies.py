"""Hypothesis strategies for CDI names, for specs that the project's validator accepts, and for
specs of any content."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, TypeVar

from hypothesis import strategies as st

from cdi_plugin.cdi import codec, model
from cdi_plugin.cdi.validate import HOOK_NAMES
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


# Specs of any content: every field reached, with the values a builder could put there by mistake
# (empty, relative, too long, out of range, odd characters, repeated), for comparing validators.

_odd_text = st.text(
    alphabet=st.sampled_from(["a", "Z", "0", "/", "=", ".", "-", "_", ":", " ", "\n", "é", "r", "w", "m"]),
    max_size=6,
)
#: Text of any length: empty, short, odd, and beyond each CDI length limit (63, 253, 4095).
any_text = st.one_of(
    st.just(""),
    texts,
    _odd_text,
    st.builds(
        lambda c, n: c * n, st.sampled_from(["a", "é", "/"]), st.sampled_from([62, 63, 64, 253, 254, 4096])
    ),
)
any_paths = st.one_of(
    st.sampled_from(["", "/", "rel", "./x", "a/b", " /x", "/dev/x"]), any_text, absolute_paths
)
#: Integers at and beyond the edges of uint32 and int64, and around zero.
any_ints = st.one_of(
    st.sampled_from(
        [0, 1, -1, UINT32_MAX, UINT32_MAX + 1, INT64[0], INT64[0] - 1, INT64[1], INT64[1] + 1, 2**80]
    ),
    st.integers(-(2**65), 2**65),
)
_names = st.one_of(device_names, any_text, st.sampled_from(["a", "0", "a-", "-a", "a:b", "a.b"]))
_vendor_or_class = st.one_of(
    vendors,
    any_text,
    st.sampled_from(["a", "ab", "a/b", "1a", "a_"]),
    st.builds(lambda n: "v" * n, st.sampled_from([62, 63, 64, 252, 253, 254])),
)
any_kinds = st.one_of(
    st.builds(lambda v, c: f"{v}/{c}", _vendor_or_class, _vendor_or_class), any_text, st.just("ab/cd/ef")
)
any_env = _tuple_of(st.one_of(env_entries, any_text, st.sampled_from(["=", "=x", "A=", "A", "A=B=C"])))
_annotation_keys = st.one_of(
    annotation_keys, any_text, st.sampled_from(["a/b", "-a", "a" * 64, "x." * 3 + "/k"])
)
any_annotations = _opt(st.dictionaries(_annotation_keys, any_text, max_size=3).map(MappingProxyType))

any_device_nodes = st.builds(
    model.DeviceNode,
    path=any_paths,
    host_path=_opt(any_paths),
    type=_opt(st.sampled_from(["", "b", "c", "u", "p", "x", "bc"])),
    major=_opt(any_ints),
    minor=_opt(any_ints),
    file_mode=_opt(any_ints),
    permissions=_opt(
        st.one_of(
            st.sampled_from(["", "none", "rrrr", "rwmr", "rwm", "r", "x", "None", "rw\n"]),
            st.text(alphabet="rwmnoe", max_size=5),
        )
    ),
    uid=_opt(any_ints),
    gid=_opt(any_ints),
)
any_mounts = st.builds(
    model.Mount,
    host_path=any_paths,
    container_path=any_paths,
    options=_opt(_tuple_of(any_text)),
    type=_opt(any_text),
)
any_hooks = st.builds(
    model.Hook,
    hook_name=st.one_of(st.sampled_from(sorted(HOOK_NAMES)), any_text),
    path=any_paths,
    args=_opt(_tuple_of(any_text)),
    env=_opt(any_env),
    timeout=_opt(any_ints),
)
any_rdt = st.builds(
    model.IntelRdt,
    clos_id=_opt(st.one_of(clos_ids, any_text, st.sampled_from([".", "..", "/", "a/b", "a\n", "é" * 2048]))),
    l3_cache_schema=_opt(any_text),
    mem_bw_schema=_opt(any_text),
    enable_cmt=_opt(st.booleans()),
    enable_mbm=_opt(st.booleans()),
    schemata=_opt(_tuple_of(any_text)),
    enable_monitoring=_opt(st.booleans()),
)
any_net_devices = _tuple_of(
    st.builds(model.NetDevice, host_interface_name=st.sampled_from(["", "eth0", "eth1"]) | any_text,
              name=st.sampled_from(["", "net0", "net1"]) | any_text)
)  # fmt: skip
any_edits = st.builds(
    model.ContainerEdits,
    env=_opt(any_env),
    device_nodes=_opt(_tuple_of(any_device_nodes)),
    net_devices=_opt(any_net_devices),
    hooks=_opt(_tuple_of(any_hooks, 2)),
    mounts=_opt(_tuple_of(any_mounts, 2)),
    intel_rdt=_opt(any_rdt),
    additional_gids=_opt(_tuple_of(any_ints)),
)


@st.composite
def any_specs(draw: st.DrawFn) -> model.Spec:
    """Any spec the model can hold with well-typed values, valid or not (duplicate names, no devices)."""
    names = draw(st.lists(_names, max_size=3))
    repeat = draw(st.booleans())
    if names and repeat:
        names.append(names[0])
    return model.Spec(
        cdi_version=draw(st.sampled_from([*KNOWN_VERSIONS, "v1.1.0", "v0.1.0", "", "1.1", "1.1.0 "])),
        kind=draw(any_kinds),
        devices=tuple(
            model.Device(name=n, container_edits=draw(any_edits), annotations=draw(any_annotations))
            for n in names
        ),
        annotations=draw(any_annotations),
        container_edits=draw(_opt(any_edits)),
    )


@st.composite
def mutated_specs(draw: st.DrawFn) -> model.Spec:
    """A valid spec (:func:`specs`) with one or two strings, integers or annotation keys replaced by
    any value of the same type: a spec whose only mistakes are those."""
    obj = codec.spec_to_obj(draw(specs()))
    for _ in range(draw(st.integers(1, 2))):
        leaves: list[tuple[Any, Any]] = []
        _leaves(obj, leaves)
        parent, key = draw(st.sampled_from(leaves))
        if isinstance(key, str) and key.startswith("\0"):  # an annotation key
            old = key[1:]
            parent[draw(_annotation_keys)] = parent.pop(old)
        elif isinstance(parent[key], str):
            parent[key] = draw(any_text | any_paths)
        else:
            parent[key] = draw(any_ints)
    return codec.spec_from_obj(obj, lenient=True)


def _leaves(value: Any, out: list[tuple[Any, Any]], in_annotations: bool = False) -> None:
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if in_annotations:
            out.append((value, f"\0{key}"))
        if isinstance(item, (str, int)) and not isinstance(item, bool):
            out.append((value, key))
        else:
            _leaves(item, out, key == "annotations")
