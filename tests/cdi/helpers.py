"""Small builders for spec documents used across the CDI tests."""

from __future__ import annotations

from typing import Any

from cdi_plugin.cdi import codec, model


def doc(
    version: str = "0.3.0",
    kind: str = "example.com/widget",
    edits: dict[str, Any] | None = None,
    name: str = "widget0",
    **top: Any,
) -> dict[str, Any]:
    """A one-device spec document; ``edits`` are the device's container edits."""
    device_edits = edits if edits is not None else {"deviceNodes": [{"path": "/dev/widget0"}]}
    out: dict[str, Any] = {
        "cdiVersion": version,
        "kind": kind,
        "devices": [{"name": name, "containerEdits": device_edits}],
    }
    out.update(top)
    return out


def spec(*args: Any, **kwargs: Any) -> model.Spec:
    return codec.spec_from_obj(doc(*args, **kwargs))
