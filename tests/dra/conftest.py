from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

DRIVER = "cdi-plugin.io"
NODE = "node-a"


def write_spec(directory: Path, kind: str, devices: dict[str, str], version: str = "0.5.0") -> Path:
    """A spec file of ``kind`` whose devices each inject one host node (name -> host path)."""
    directory.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {
        "cdiVersion": version,
        "kind": kind,
        "devices": [
            {"name": name, "containerEdits": {"deviceNodes": [{"path": f"/dev/{name}", "hostPath": host}]}}
            for name, host in devices.items()
        ],
    }
    path = directory / (kind.replace("/", "-") + ".json")
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    return tmp_path / "cdi"


@pytest.fixture
def host_nodes(tmp_path: Path) -> Path:
    """A directory standing in for /dev: the files are the host device nodes."""
    d = tmp_path / "dev"
    d.mkdir()
    return d
