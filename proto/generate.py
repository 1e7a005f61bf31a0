"""Generate the Python code of the kubelet APIs from the protos in proto/.

    python proto/generate.py           write every target package (see TARGETS)
    python proto/generate.py --check   regenerate into a temporary directory and exit 1 if the
                                       committed code differs (or has files too many or too few)

Uses grpcio-tools (protoc + the gRPC plugin) and mypy-protobuf (the .pyi stubs), at the versions
pinned in pyproject.toml: another version generates different code, which --check reports.
protoc writes imports as ``from deviceplugin.v1beta1 import api_pb2``; they are rewritten to the
package path so the code imports as, for example, ``cdi_plugin.deviceplugin._proto``.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")


class Target(NamedTuple):
    """One proto file and the package its code is generated into."""

    proto: str  # relative to proto/
    package: str  # dotted import path of the generated package
    importer: str  # the only module allowed to import it
    out: Path  # where the package is written

    @property
    def init(self) -> str:
        return f'''"""Code generated from proto/{self.proto} by proto/generate.py; do not edit.

Only {self.importer} imports this package.
"""
'''


def _target(proto: str, package: str, importer: str) -> Target:
    return Target(proto, package, importer, ROOT.joinpath(*package.split(".")))


TARGETS = (
    _target(
        "deviceplugin/v1beta1/api.proto", "cdi_plugin.deviceplugin._proto", "cdi_plugin.deviceplugin.api"
    ),
    _target("pluginregistration/v1/api.proto", "cdi_plugin.dra._proto.registration_v1", "cdi_plugin.dra.api"),
    _target("dra/v1/api.proto", "cdi_plugin.dra._proto.dra_v1", "cdi_plugin.dra.api"),
    _target("dra/v1beta1/api.proto", "cdi_plugin.dra._proto.dra_v1beta1", "cdi_plugin.dra.api"),
    _target("dra-health/v1alpha1/api.proto", "cdi_plugin.dra._proto.health_v1alpha1", "cdi_plugin.dra.api"),
    _target("dra-health/v1/api.proto", "cdi_plugin.dra._proto.health_v1", "cdi_plugin.dra.api"),
)


def _plugin(name: str) -> str:
    """A protoc plugin installed next to this Python (the venv's bin), else on PATH."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        sys.exit(f"generate.py: error: {name} not found (install mypy-protobuf)")
    return found


def generate(target: Target, out: Path) -> None:
    """Write the generated package of ``target`` (``__init__.py`` and four modules) into ``out``."""
    with tempfile.TemporaryDirectory() as raw:
        tmp = Path(raw)
        cmd = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{PROTO_ROOT}",
            f"--python_out={tmp}",
            f"--grpc_python_out={tmp}",
            f"--plugin=protoc-gen-mypy={_plugin('protoc-gen-mypy')}",
            f"--plugin=protoc-gen-mypy_grpc={_plugin('protoc-gen-mypy_grpc')}",
            f"--mypy_out={tmp}",
            f"--mypy_grpc_out={tmp}",
            target.proto,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            sys.exit(f"generate.py: error: protoc failed: {result.stderr.strip()}")
        out.mkdir(parents=True, exist_ok=True)
        src = tmp / Path(target.proto).parent.as_posix().replace("-", "_")  # as protoc names modules
        protoc_import = f"from {src.relative_to(tmp).as_posix().replace('/', '.')} import api_pb2 as"
        for name in GENERATED:
            text = (src / name).read_text(encoding="utf-8")
            if name.startswith("api_pb2_grpc"):
                if protoc_import not in text:
                    sys.exit(f"generate.py: error: {name}: expected import {protoc_import!r} not found")
                text = text.replace(protoc_import, f"from {target.package} import api_pb2 as")
            (out / name).write_text(text, encoding="utf-8")
        (out / "__init__.py").write_text(target.init, encoding="utf-8")


def _files(directory: Path) -> dict[str, str]:
    return {
        p.name: p.read_text(encoding="utf-8")
        for p in sorted(directory.iterdir())
        if p.is_file() and p.suffix in {".py", ".pyi"}
    }


def _stale(target: Target) -> bool:
    """Whether the committed code of ``target`` differs from what the generator writes now."""
    with tempfile.TemporaryDirectory() as raw:
        fresh_dir = Path(raw) / "_proto"
        generate(target, fresh_dir)
        fresh = _files(fresh_dir)
    out_dir = target.out
    committed = _files(out_dir) if out_dir.is_dir() else {}
    stale = False
    for name in sorted(set(fresh) | set(committed)):
        if name not in committed:
            print(f"{out_dir / name}: missing", file=sys.stderr)
        elif name not in fresh:
            print(f"{out_dir / name}: not generated from the proto (remove it)", file=sys.stderr)
        elif fresh[name] != committed[name]:
            diff = difflib.unified_diff(
                committed[name].splitlines(keepends=True),
                fresh[name].splitlines(keepends=True),
                f"committed/{name}",
                f"generated/{name}",
                n=1,
            )
            sys.stderr.writelines(list(diff)[:40])
            print(f"{out_dir / name}: out of date", file=sys.stderr)
        else:
            continue
        stale = True
    return stale


def check() -> int:
    """0 when the committed code is what the generator writes now; 1 (with a diff) otherwise."""
    stale = [_stale(target) for target in TARGETS]  # every target, to report them all
    if any(stale):
        print(
            "generate.py: the generated code is out of date; run: python proto/generate.py", file=sys.stderr
        )
        return 1
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="fail if the committed code is out of date")
    args = parser.parse_args()
    if args.check:
        return check()
    for target in TARGETS:
        generate(target, target.out)
        print(f"wrote {target.out.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
