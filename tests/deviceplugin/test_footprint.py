"""The plugin process loads only what it needs: its memory limit in a DaemonSet depends on it."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from tests.scan.helpers import CDI_GEN


def test_the_plugin_never_imports_the_scanner_or_the_human_output_stack() -> None:
    probe = (
        "import sys, cdi_plugin.cli.plugin, cdi_plugin.deviceplugin.daemon;"
        "print(' '.join(sorted(m for m in ('jsonschema_rs', 'yaml', 'rich', 'pyudev', 'click') "
        "if m in sys.modules)))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert loaded.stdout.split() == ["click"]


_SERVE = """
import atexit, sys
OPTIONAL = ("prometheus_client", "lightkube", "cdi_plugin.deviceplugin._proto.api_pb2_grpc", "ssl",
            "cdi_plugin.discovery", "jsonschema_rs", "cdi_plugin.metrics.dra", "cdi_plugin.dra.report")
atexit.register(lambda: print(
    "loaded:", *sorted(m for m in OPTIONAL if sys.modules.get(m)),
    *(["libcrypto"] if "/libcrypto" in open("/proc/self/maps").read() else []), file=sys.stderr, flush=True))
from cdi_plugin.cli.plugin import main
main(["serve", "--spec-dir", sys.argv[1], "--plugin-dir", sys.argv[2], *sys.argv[3:]])
"""


def _serve(tmp_path: Path, *flags: str) -> subprocess.Popen[str]:
    specs, plugins = tmp_path / "cdi", tmp_path / "plugins"
    specs.mkdir()
    plugins.mkdir()
    return subprocess.Popen(
        [sys.executable, "-c", _SERVE, str(specs), str(plugins), *flags], stderr=subprocess.PIPE, text=True
    )


def _loaded(stderr: str) -> list[str]:
    [loaded] = [line for line in stderr.splitlines() if line.startswith("loaded:")]
    return loaded.split()[1:]


def _serve_loads(tmp_path: Path, *flags: str) -> list[str]:
    """What a real ``cdi-plugin serve`` process loaded of the modules it may do without (the
    generated gRPC stubs included), once it ran (read the spec directory, listening for changes)
    and stopped on SIGTERM."""
    proc = _serve(tmp_path, *flags)
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "nothing to serve yet" in line:
                break
        proc.send_signal(signal.SIGTERM)
        rest = proc.communicate(timeout=30)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, rest
    return _loaded(rest)


def test_serve_without_a_metrics_address_loads_none_of_the_modules_or_openssl_it_does_without(
    tmp_path: Path,
) -> None:
    assert _serve_loads(tmp_path) == []


def test_serve_with_a_metrics_address_loads_prometheus_client_and_the_openssl_it_imports(
    tmp_path: Path,
) -> None:
    loaded = _serve_loads(tmp_path, "--metrics-address", "127.0.0.1:0")
    assert loaded == ["prometheus_client", "ssl", "libcrypto"]


def test_serve_checks_its_configuration_in_a_child_process_and_loads_no_json_schema_validator(
    tmp_path: Path,
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("plugin:\n  replicas: 2\n  gracePeriod: 1m\n")
    assert _serve_loads(tmp_path, "--config", str(config)) == []


def test_serve_refuses_a_bad_configuration_with_the_message_of_cdi_gen(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "classes: [{vendor: cdi-plugin.io, class: x1, match: {}, extra: 1}]\nplugin: {replicas: 0}"
    )
    serve = _serve(tmp_path, "--config", str(config))
    try:
        stderr = serve.communicate(timeout=30)[1]
    finally:
        if serve.poll() is None:
            serve.kill()
            serve.wait()
    gen = subprocess.run(
        [str(CDI_GEN), "scan", "--dry-run", "--config", str(config)],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert (serve.returncode, gen.returncode) == (1, 1)
    error = (
        f"{config}: classes[0].match: {{}} is not valid under any of the schemas listed in the 'anyOf' "
        "keyword (name at least one of subsystem, kernel or devnode, so a class never matches every "
        "device) (and 2 more)"
    )
    assert gen.stderr == f"cdi-gen: error: {error}\n"
    assert stderr.splitlines()[0] == f"cdi-plugin: error: {error}"
    assert _loaded(stderr) == [], "the serving process never loaded jsonschema-rs"
