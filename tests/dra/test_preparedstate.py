"""The prepared-claims document: every field checked on load, one line naming it and the reason."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cdi_plugin.dra.prepare import PreparedDevice
from cdi_plugin.dra.preparedstate import PreparedState, PreparedStateError, claim_problem, decode, encode

SOURCE = "/k/plugins/d/prepared.json"
CARD0 = PreparedDevice(("gpu",), "node-a", "gpu-card0", ("example.com/gpu=card0",))
CARD1 = PreparedDevice(("x", "y"), "node-a", "gpu-card1", ("example.com/gpu=card1",))
SHARED = PreparedDevice(("gpu",), "node-a", "gpu-card0", ("example.com/gpu=card0",), admin_access=True)


def device(**changes: Any) -> dict[str, Any]:
    obj = {
        "request_names": ["gpu"],
        "pool_name": "node-a",
        "device_name": "gpu-card0",
        "cdi_device_ids": ["example.com/gpu=card0"],
        "admin_access": False,
    }
    return {k: v for k, v in (obj | changes).items() if v is not ...}


def doc(claims: Any, **top: Any) -> bytes:
    return json.dumps({"version": 1, "claims": claims, **top}).encode()


def test_round_trip_and_holders() -> None:
    state = PreparedState({"uid-b": (CARD1,), "uid-a": (CARD0,), "uid-admin": (SHARED,)})
    data = encode(state)
    assert (data.count(b"\n"), b", " in data) == (1, False)  # compact: the record of each change
    assert list(json.loads(data)["claims"]) == ["uid-a", "uid-admin", "uid-b"]  # canonical order
    again = decode(data, SOURCE)
    assert again == state
    assert dict(again.holders) == {("node-a", "gpu-card0"): "uid-a", ("node-a", "gpu-card1"): "uid-b"}
    assert decode(encode(PreparedState()), SOURCE) == PreparedState()


def test_changes_make_new_states() -> None:
    empty = PreparedState()
    one = empty.with_claims({"uid-a": (CARD0,)})
    assert dict(one.holders) == {("node-a", "gpu-card0"): "uid-a"}
    assert empty.claims == {}
    assert one.without(["uid-a", "uid-never"]) == empty
    assert one.without(["uid-never"]) is one
    assert one.with_claims({}) is one


def reference(state: PreparedState) -> bytes:
    """The compact document as one dump of the whole state."""
    claims = {
        uid: [device(**{f: getattr(d, f) for f in device()}) for d in devices]
        for uid, devices in sorted(state.claims.items())
    }
    return (json.dumps({"version": 1, "claims": claims}, separators=(",", ":")) + "\n").encode()


TWO = PreparedDevice(("a", "b"), "node-a/p", "x", ("example.com/xx=y", "ab.io/bc=c"))
DEVICES = [CARD0, CARD1, SHARED, TWO]
CHANGES = st.lists(
    st.tuples(
        st.booleans(),
        st.dictionaries(
            st.sampled_from(["uid-a", "uid-b", "uid-c", "uid-d"]),
            st.lists(st.sampled_from(DEVICES), max_size=3, unique=True).map(tuple),
            max_size=3,
        ),
    ),
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(CHANGES)
def test_a_state_changed_step_by_step_encodes_and_holds_as_one_made_whole(changes: Any) -> None:
    """Each claim's entry is encoded once and the holders are carried over: after any sequence of
    changes the record and the holders are those of the state made from its claims at once."""
    state = PreparedState()
    for add, claims in changes:
        state = state.with_claims(claims) if add else state.without(claims)
        data = encode(state)
        assert data == reference(state)
        assert encode(state) == data  # the entries kept are the same
        whole = PreparedState(state.claims)
        assert dict(state.holders) == dict(whole.holders)
        devices = [d for ds in state.claims.values() for d in ds]
        held = [(d.pool_name, d.device_name) for d in devices if not d.admin_access]
        listed = [len({(d.pool_name, d.device_name) for d in ds}) == len(ds) for ds in state.claims.values()]
        if len(set(held)) == len(held) and all(listed):  # as Prepare records: no device held twice
            assert decode(data, SOURCE) == state


def test_a_file_of_an_earlier_release_is_read() -> None:
    legacy = json.dumps({"uid-1": [device()], "uid-2": []}).encode()
    assert decode(legacy, SOURCE) == PreparedState({"uid-1": (CARD0,), "uid-2": ()})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "invalid JSON: line 1 column 2: Expecting property name enclosed in double quotes"),
        (b"version: 1\nclaims: {}\n", "not JSON"),
        (b"[1, 2]", "an array where an object belongs"),
        (
            b"[" * 200_000 + b"]" * 200_000,
            "nested more than 64 levels deep, which no prepared-claims file is",
        ),
        (b"", "the file is empty (no prepared-claims file data)"),
        (doc({}, extra=1), 'unknown field "extra"'),
        (b'{"version": 1}', "no 'claims'"),
        (b'{"version": 2, "claims": {}}', "version: 2; this driver reads version 1"),
        (doc([]), "claims: an array where an object of claims by UID belongs"),
        (doc({"uid-1": {}}), 'claims["uid-1"]: an object where an array of devices belongs'),
        (doc({"uid\n1": []}), 'claims["uid\\n1"]: not a claim UID'),
        (doc({"u" * 129: []}), "not a claim UID (at most 128 letters, digits"),
        (doc({"uid-1": [device()] * 33}), 'claims["uid-1"]: 33 devices, more than a claim has (32)'),
        (doc({"uid-1": [device(), device()]}), 'claims["uid-1"]: a device is listed twice'),
        (doc({"uid-1": ["x"]}), 'claims["uid-1"][0]: a string where a device object belongs'),
        (doc({"uid-1": [device(shareID="s")]}), 'claims["uid-1"][0]: unknown field "shareID"'),
        (doc({"uid-1": [device(pool_name=...)]}), "claims[\"uid-1\"][0]: missing field 'pool_name'"),
        (doc({"uid-1": [device(pool_name=["node-a"])]}), ".pool_name: an array where a pool name belongs"),
        (doc({"uid-1": [device(pool_name="Node_A")]}), '.pool_name: "Node_A" is not a pool name'),
        (doc({"uid-1": [device(pool_name="a" * 254)]}), '.pool_name: "aaaaaaaaaa'),
        (doc({"uid-1": [device(device_name=7)]}), ".device_name: a number where a device name belongs"),
        (doc({"uid-1": [device(device_name="gpu/card0")]}), '"gpu/card0" is not a device name (a DNS label)'),
        (doc({"uid-1": [device(admin_access="no")]}), ".admin_access: a string where true or false belongs"),
        (doc({"uid-1": [device(admin_access=1)]}), ".admin_access: a number where true or false belongs"),
        (doc({"uid-1": [device(request_names="gpu")]}), ".request_names: a string where an array of"),
        (doc({"uid-1": [device(request_names=[["gpu"]])]}), ".request_names: an array where a request name"),
        (doc({"uid-1": [device(request_names=["GPU"])]}), '.request_names: "GPU" is not a request name'),
        (doc({"uid-1": [device(request_names=["r"] * 33)]}), ".request_names: 33 entries; 0 to 32 expected"),
        (doc({"uid-1": [device(cdi_device_ids=[])]}), ".cdi_device_ids: 0 entries; 1 to 32 expected"),
        (
            doc({"uid-1": [device(cdi_device_ids=["gpu=card0"])]}),
            ".cdi_device_ids: invalid device name 'gpu=card0': invalid kind 'gpu': expected 'vendor/class'",
        ),
        (
            doc({"uid-1": [device()], "uid-2": [device(request_names=["other"])]}),
            'claims["uid-2"]: device node-a/gpu-card0 is also prepared for claim "uid-1", and neither has '
            "admin access",
        ),
        (b'{"uid-1": [{"pool_name": "x"}]}', "claims[\"uid-1\"][0]: missing field 'request_names'"),
        (b'{"uid-1": 5}', 'claims["uid-1"]: a number where an array of devices belongs'),
    ],
)
def test_each_wrong_field_is_one_line_naming_it(data: bytes, message: str) -> None:
    with pytest.raises(PreparedStateError) as info:
        decode(data, SOURCE)
    text = str(info.value)
    assert text.startswith(f"{SOURCE}: "), text
    assert message in text, text
    assert "\n" not in text
    assert len(text) < 300


def test_admin_access_may_share_a_device() -> None:
    data = doc(
        {"uid-1": [device()], "uid-2": [device(admin_access=True)], "uid-3": [device(admin_access=True)]}
    )
    assert dict(decode(data, SOURCE).holders) == {("node-a", "gpu-card0"): "uid-1"}


def test_a_claim_is_checked_by_the_same_rules_before_it_is_kept() -> None:
    assert claim_problem("uid-1", (CARD0, CARD1)) is None
    assert claim_problem("uid 1", (CARD0,)) == (
        "claims[\"uid 1\"]: not a claim UID (at most 128 letters, digits, '-', '_', '.', ':')"
    )
    bad = PreparedDevice(("",), "node-a", "gpu-card0", ("example.com/gpu=card0",))
    for _ in range(2):  # the verdict on a device is kept: the second call names the field too
        assert (
            claim_problem("uid-1", (CARD0, bad))
            == 'claims["uid-1"][1].request_names: "" is not a request name (a DNS label)'
        )
