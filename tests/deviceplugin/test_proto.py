"""The generated API code: up to date with proto/, the kubelet's wire names, and who may import it."""

from __future__ import annotations

import ast
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf.descriptor import FieldDescriptor

from cdi_plugin.deviceplugin._proto import api_pb2

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "cdi_plugin"


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("proto_generate", ROOT / "proto" / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_code_is_what_the_generator_writes() -> None:
    result = subprocess.run(
        [sys.executable, str(ROOT / "proto" / "generate.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


def test_the_check_fails_on_stale_or_extra_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gen = _generator()
    copy = tmp_path / "_proto"
    target = gen.TARGETS[0]._replace(out=copy)
    shutil.copytree(gen.TARGETS[0].out, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(gen, "TARGETS", (target,))
    assert gen.check() == 0
    stale = copy / "api_pb2.pyi"
    stale.write_text(stale.read_text() + "\n# edited by hand\n")
    assert gen.check() == 1
    gen.generate(target, copy)
    assert gen.check() == 0
    (copy / "extra_pb2.py").write_text("")
    assert gen.check() == 1


def test_generated_grpc_module_imports_from_the_package() -> None:
    text = (PACKAGE / "deviceplugin" / "_proto" / "api_pb2_grpc.py").read_text()
    assert "from cdi_plugin.deviceplugin._proto import api_pb2 as" in text
    assert "from deviceplugin.v1beta1" not in text


T = FieldDescriptor
# (message, field, number, type, repeated) from the kubelet's api.proto
FIELDS = [
    ("DevicePluginOptions", "pre_start_required", 1, T.TYPE_BOOL, False),
    ("DevicePluginOptions", "get_preferred_allocation_available", 2, T.TYPE_BOOL, False),
    ("RegisterRequest", "version", 1, T.TYPE_STRING, False),
    ("RegisterRequest", "endpoint", 2, T.TYPE_STRING, False),
    ("RegisterRequest", "resource_name", 3, T.TYPE_STRING, False),
    ("RegisterRequest", "options", 4, T.TYPE_MESSAGE, False),
    ("ListAndWatchResponse", "devices", 1, T.TYPE_MESSAGE, True),
    ("TopologyInfo", "nodes", 1, T.TYPE_MESSAGE, True),
    ("NUMANode", "ID", 1, T.TYPE_INT64, False),
    ("Device", "ID", 1, T.TYPE_STRING, False),
    ("Device", "health", 2, T.TYPE_STRING, False),
    ("Device", "topology", 3, T.TYPE_MESSAGE, False),
    ("PreStartContainerRequest", "devices_ids", 1, T.TYPE_STRING, True),
    ("PreferredAllocationRequest", "container_requests", 1, T.TYPE_MESSAGE, True),
    ("ContainerPreferredAllocationRequest", "available_deviceIDs", 1, T.TYPE_STRING, True),
    ("ContainerPreferredAllocationRequest", "must_include_deviceIDs", 2, T.TYPE_STRING, True),
    ("ContainerPreferredAllocationRequest", "allocation_size", 3, T.TYPE_INT32, False),
    ("PreferredAllocationResponse", "container_responses", 1, T.TYPE_MESSAGE, True),
    ("ContainerPreferredAllocationResponse", "deviceIDs", 1, T.TYPE_STRING, True),
    ("AllocateRequest", "container_requests", 1, T.TYPE_MESSAGE, True),
    ("ContainerAllocateRequest", "devices_ids", 1, T.TYPE_STRING, True),
    ("CDIDevice", "name", 1, T.TYPE_STRING, False),
    ("AllocateResponse", "container_responses", 1, T.TYPE_MESSAGE, True),
    ("ContainerAllocateResponse", "envs", 1, T.TYPE_MESSAGE, True),
    ("ContainerAllocateResponse", "mounts", 2, T.TYPE_MESSAGE, True),
    ("ContainerAllocateResponse", "devices", 3, T.TYPE_MESSAGE, True),
    ("ContainerAllocateResponse", "annotations", 4, T.TYPE_MESSAGE, True),
    ("ContainerAllocateResponse", "cdi_devices", 5, T.TYPE_MESSAGE, True),
    ("Mount", "container_path", 1, T.TYPE_STRING, False),
    ("Mount", "host_path", 2, T.TYPE_STRING, False),
    ("Mount", "read_only", 3, T.TYPE_BOOL, False),
    ("DeviceSpec", "container_path", 1, T.TYPE_STRING, False),
    ("DeviceSpec", "host_path", 2, T.TYPE_STRING, False),
    ("DeviceSpec", "permissions", 3, T.TYPE_STRING, False),
]


@pytest.mark.parametrize(("message", "name", "number", "type_", "repeated"), FIELDS)
def test_fields_match_the_kubelet(message: str, name: str, number: int, type_: int, repeated: bool) -> None:
    field = api_pb2.DESCRIPTOR.message_types_by_name[message].fields_by_name[name]
    assert (field.number, field.type, field.is_repeated) == (number, type_, repeated)


def test_messages_have_no_other_fields() -> None:
    expected: dict[str, set[str]] = {}
    for message, name, *_ in FIELDS:
        expected.setdefault(message, set()).add(name)
    expected["Empty"] = set()
    expected["PreStartContainerResponse"] = set()
    actual = {
        name: {f.name for f in m.fields} for name, m in api_pb2.DESCRIPTOR.message_types_by_name.items()
    }
    assert actual == expected
    assert api_pb2.DESCRIPTOR.package == "v1beta1"


def test_services_and_methods_match_the_kubelet() -> None:
    services = {
        s.full_name: {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in s.methods}
        for s in api_pb2.DESCRIPTOR.services_by_name.values()
    }
    assert services == {
        "v1beta1.Registration": {"Register": ("RegisterRequest", "Empty", False)},
        "v1beta1.DevicePlugin": {
            "GetDevicePluginOptions": ("Empty", "DevicePluginOptions", False),
            "ListAndWatch": ("Empty", "ListAndWatchResponse", True),
            "GetPreferredAllocation": ("PreferredAllocationRequest", "PreferredAllocationResponse", False),
            "Allocate": ("AllocateRequest", "AllocateResponse", False),
            "PreStartContainer": ("PreStartContainerRequest", "PreStartContainerResponse", False),
        },
    }


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def test_only_the_api_module_imports_generated_code_and_the_plugin_stays_off_discovery() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "_proto" in path.parts:
            continue
        imports = _imports(path)
        uses_proto = any(i.startswith("cdi_plugin.deviceplugin._proto") for i in imports)
        assert uses_proto == (path == PACKAGE / "deviceplugin" / "api.py"), path
        if "deviceplugin" in path.parts:
            forbidden = [i for i in imports if i.startswith(("cdi_plugin.discovery", "cdi_plugin.generate"))]
            assert forbidden == [], path
