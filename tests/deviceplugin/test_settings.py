"""Settings from defaults, the configuration file's ``plugin`` section and flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdi_plugin.deviceplugin.settings import DEFAULT_PLUGIN_DIR, Settings, build, parse_duration
from cdi_plugin.errors import ConfigError
from cdi_plugin.store.configfile import parse_config
from cdi_plugin.store.files import SPEC_DIRS_ENV


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("300", 300.0),
        ("1.5", 1.5),
        ("90s", 90.0),
        ("5m", 300.0),
        ("1h30m", 5400.0),
        ("250ms", 0.25),
        (0, 0.0),
    ],
)
def test_durations(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


def test_spec_dirs_default_to_the_environment_below_the_file_and_flags(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SPEC_DIRS_ENV, "/srv/cdi:/run/vendor-cdi")
    assert build(None, "<none>").spec_dirs == (Path("/srv/cdi"), Path("/run/vendor-cdi"))
    section = {"specDirs": ["/from/file"]}
    assert build(section, "c.yaml").spec_dirs == (Path("/from/file"),)
    assert build(section, "c.yaml", spec_dirs=(Path("/from/flag"),)).spec_dirs == (Path("/from/flag"),)


@pytest.mark.parametrize("text", ["", "5x", "m5", "-1", "5m-", "1h 30m", "nan", "inf"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def test_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SPEC_DIRS_ENV)
    s = Settings()
    assert s.spec_dirs == (Path("/etc/cdi"), Path("/var/run/cdi"))
    assert s.plugin_dir == DEFAULT_PLUGIN_DIR
    assert s.kubelet_socket == DEFAULT_PLUGIN_DIR / "kubelet.sock"
    assert (s.replicas, s.cdi_strategy, s.grace_period) == (1, "both", 300.0)


CONFIG = b"""
plugin:
  specDirs: [/srv/cdi]
  pluginDir: /srv/plugins
  kinds: ["vendor.example/*"]
  replicas: 2
  resources:
    "cdi-plugin.io/*": {replicas: 4}
    "cdi-plugin.io/fuse": {replicas: 8}
  cdiStrategy: cri
  gracePeriod: 90s
"""


def test_config_section_then_flags_win() -> None:
    section = parse_config(CONFIG, "c.yaml")["plugin"]
    s = build(section, "c.yaml", replicas=None, cdi_strategy="annotations", plugin_dir=None)
    assert s.spec_dirs == (Path("/srv/cdi"),)
    assert s.kubelet_socket == Path("/srv/plugins/kubelet.sock")
    assert s.kinds == ("vendor.example/*",)
    assert s.cdi_strategy == "annotations"
    assert s.grace_period == 90.0
    assert s.replicas_for("cdi-plugin.io/fuse") == 8
    assert s.replicas_for("cdi-plugin.io/tun") == 4
    assert s.replicas_for("vendor.example/x") == 2
    assert build(section, "c.yaml", replicas=3).replicas_for("vendor.example/x") == 3
    assert build(section, "c.yaml", replicas=3).replicas_for("cdi-plugin.io/tun") == 4
    assert s.matching_glob("vendor.example/gpu") == "vendor.example/*"
    assert s.matching_glob("nvidia.com/gpu") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b"plugin: {replicas: 0}", "c.yaml: plugin.replicas: 0 is less than the minimum of 1"),
        (b"plugin: {gracePeriod: 5x}", "c.yaml: plugin.gracePeriod:"),
        (b"plugin: {cdiStrategy: env}", "c.yaml: plugin.cdiStrategy:"),
        (b"plugin: {resources: {gpu: {replicas: 2}}}", "c.yaml: plugin.resources.gpu: invalid key 'gpu'"),
        (b"plugin: {kinds: [nokind]}", "c.yaml: plugin.kinds[0]:"),
        (b"plugin: {specDirs: [relative]}", "c.yaml: plugin.specDirs[0]:"),
        (b"plugin: {replica: 2}", "c.yaml: plugin.replica: unknown field 'replica'"),
    ],
)
def test_bad_plugin_sections_name_the_key(text: bytes, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(text, "c.yaml")
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_a_plugin_dir_too_long_for_unix_sockets_is_refused() -> None:
    long_dir = "/tmp/" + "x" * 80
    with pytest.raises(ConfigError, match=r"--plugin-dir /tmp/x+: 85 bytes is too long for the unix sockets"):
        build(None, "flags", plugin_dir=Path(long_dir))
