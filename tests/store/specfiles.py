"""Writing small spec files for the store and CLI tests."""

from __future__ import annotations

import json
from pathlib import Path


def write_spec(directory: Path, file_name: str, kind: str, *names: str, env: str = "") -> Path:
    """A valid 0.3.0 spec of ``kind`` with one device node per device name."""
    devices = []
    for name in names:
        edits: dict[str, object] = {"deviceNodes": [{"path": f"/dev/{name}"}]}
        if env:
            edits["env"] = [env]
        devices.append({"name": name, "containerEdits": edits})
    spec = {"cdiVersion": "0.3.0", "kind": kind, "devices": devices}
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / file_name
    path.write_text(json.dumps(spec, indent=2) + "\n")
    return path
