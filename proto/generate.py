"""Generate the Python code of the kubelet device plugin API from proto/deviceplugin/v1beta1/api.proto.

    python proto/generate.py           write cdi_plugin/deviceplugin/_proto/
    python proto/generate.py --check   regenerate into a temporary directory and exit 1 if the
                                       committed code differs (or has files too many or too few)

Uses grpcio-tools (protoc + the gRPC plugin) and mypy-protobuf (the .pyi stubs), at the versions
pinned in pyproject.toml: another version generates different code, which --check reports.
protoc writes imports as ``from deviceplugin.v1beta1 import api_pb2``; they are rewritten to the
package path so the code imports as ``cdi_plugin.deviceplugin._proto``.
"""

from __future__ import annotations

import argparse
import difflib
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
PROTO_FILE = "deviceplugin/v1beta1/api.proto"
OUT_DIR = ROOT / "cdi_plugin" / "deviceplugin" / "_proto"
PACKAGE = "cdi_plugin.deviceplugin._proto"
PROTOC_IMPORT = "from deviceplugin.v1beta1 import api_pb2 as"
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py", "api_pb2_grpc.pyi")
INIT = '''"""Code generated from proto/deviceplugin/v1beta1/api.proto by proto/generate.py; do not edit.

Only cdi_plugin.deviceplugin.api imports this package.
"""
'''


def _plugin(name: str) -> str:
    """A protoc plugin installed next to this Python (the venv's bin), else on PATH."""
    local = Path(sys.executable).parent / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        sys.exit(f"generate.py: error: {name} not found (install mypy-protobuf)")
    return found


def generate(out: Path) -> None:
    """Write the generated package (``__init__.py`` and the four modules) into ``out``."""
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
            PROTO_FILE,
        ]
        result = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            sys.exit(f"generate.py: error: protoc failed: {result.stderr.strip()}")
        out.mkdir(parents=True, exist_ok=True)
        src = tmp / Path(PROTO_FILE).parent
        for name in GENERATED:
            text = (src / name).read_text(encoding="utf-8")
            if name.startswith("api_pb2_grpc"):
                if PROTOC_IMPORT not in text:
                    sys.exit(f"generate.py: error: {name}: expected import {PROTOC_IMPORT!r} not found")
                text = text.replace(PROTOC_IMPORT, f"from {PACKAGE} import api_pb2 as")
            (out / name).write_text(text, encoding="utf-8")
        (out / "__init__.py").write_text(INIT, encoding="utf-8")


def _files(directory: Path) -> dict[str, str]:
    return {
        p.name: p.read_text(encoding="utf-8")
        for p in sorted(directory.iterdir())
        if p.is_file() and p.suffix in {".py", ".pyi"}
    }


def check() -> int:
    """0 when the committed code is what the generator writes now; 1 (with a diff) otherwise."""
    with tempfile.TemporaryDirectory() as raw:
        fresh_dir = Path(raw) / "_proto"
        generate(fresh_dir)
        fresh = _files(fresh_dir)
    committed = _files(OUT_DIR) if OUT_DIR.is_dir() else {}
    stale = False
    for name in sorted(set(fresh) | set(committed)):
        if name not in committed:
            print(f"{OUT_DIR / name}: missing", file=sys.stderr)
        elif name not in fresh:
            print(f"{OUT_DIR / name}: not generated from the proto (remove it)", file=sys.stderr)
        elif fresh[name] != committed[name]:
            diff = difflib.unified_diff(
                committed[name].splitlines(keepends=True),
                fresh[name].splitlines(keepends=True),
                f"committed/{name}",
                f"generated/{name}",
                n=1,
            )
            sys.stderr.writelines(list(diff)[:40])
            print(f"{OUT_DIR / name}: out of date", file=sys.stderr)
        else:
            continue
        stale = True
    if stale:
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
    generate(OUT_DIR)
    print(f"wrote {OUT_DIR.relative_to(ROOT)}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
