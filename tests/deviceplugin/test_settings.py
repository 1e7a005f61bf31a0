"""Settings from defaults, the configuration file's ``plugin`` section and flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from cdi_plugin.deviceplugin.settings import (
    ALLOW_BOTH_KEY,
    DEFAULT_PLUGIN_DIR,
    Settings,
    build,
    parse_duration,
)
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


def _settings(text: str, **flags: object) -> Settings:
    return build(parse_config(text.encode(), "c.yaml").get("plugin"), "c.yaml", **flags)


ROUTED = """
plugin:
  resources:
    "cdi-plugin.io/usb-*": {api: dra}
    "cdi-plugin.io/*": {api: device-plugin}
    "cdi-plugin.io/usb-serial": {replicas: 1}
    "cdi-plugin.io/usb-fast": {api: device-plugin}
    "vendor.example/*": {api: dra}
"""


def test_a_kinds_api_comes_from_its_own_entry_then_the_first_glob_then_the_default() -> None:
    s = _settings(ROUTED, api="both")
    assert s.api_for("cdi-plugin.io/usb-fast") == "device-plugin"  # exact, over the glob before it
    assert s.api_for("cdi-plugin.io/usb-serial") == "dra"  # its entry names no api: the first glob
    assert s.api_for("cdi-plugin.io/fuse") == "device-plugin"  # the second glob
    assert s.api_for("vendor.example/gpu") == "dra"
    assert s.api_for("other.example/x") == "device-plugin"  # no entry: the device plugin with both
    assert _settings(ROUTED, api="dra").api_for("other.example/x") == "dra"  # the one side that runs
    assert _settings(ROUTED).api_for("other.example/x") == "device-plugin"


@pytest.mark.parametrize(
    ("api", "kind", "device_plugin", "dra"),
    [
        ("both", "cdi-plugin.io/fuse", True, False),
        ("both", "vendor.example/gpu", False, True),
        ("both", "other.example/x", True, False),
        ("dra", "cdi-plugin.io/fuse", False, False),  # named for the device plugin, which does not run
        ("dra", "other.example/x", False, True),
        ("device-plugin", "vendor.example/gpu", False, False),
        ("device-plugin", "other.example/x", True, False),
    ],
)
def test_a_side_serves_a_kind_when_it_runs_and_the_kind_is_its(
    api: str, kind: str, device_plugin: bool, dra: bool
) -> None:
    s = _settings(ROUTED, api=api)
    assert (s.serves("device-plugin", kind), s.serves("dra", kind)) == (device_plugin, dra)


def test_each_running_side_says_why_it_leaves_a_kind_out() -> None:
    both, dra = _settings(ROUTED, api="both"), _settings(ROUTED, api="dra")
    gpu = "vendor.example/gpu"
    assert both.left_out("device-plugin", gpu) == "plugin.resources.vendor.example/*.api is dra"
    assert both.left_out("dra", "other.example/x") == (
        "no plugin.resources entry names its api, so with --api both the device plugin serves it"
    )
    assert both.left_out("dra", "vendor.example/gpu") is None
    assert dra.left_out("dra", "cdi-plugin.io/fuse") == (
        "plugin.resources.cdi-plugin.io/*.api is device-plugin, "
        "and the device plugin does not run (--api dra)"
    )
    assert dra.left_out("device-plugin", "cdi-plugin.io/fuse") is None  # that side does not run: no log


SHARED = """
plugin:
  replicas: {replicas}
  resources:
    "cdi-plugin.io/fuse": {{api: both, replicas: 8}}
    "cdi-plugin.io/*": {{api: both}}
"""


def test_kinds_shared_by_design_may_be_served_through_both_apis() -> None:
    s = _settings(SHARED.format(replicas=2), api="both")
    for kind in ("cdi-plugin.io/fuse", "cdi-plugin.io/tun"):
        assert s.serves("device-plugin", kind)
        assert s.serves("dra", kind)
    with pytest.raises(ConfigError, match=r"plugin.resources.cdi-plugin.io/\*.api: both, but its kinds are"):
        _settings(SHARED.format(replicas=1))
    assert _settings(SHARED.format(replicas=1), replicas=2).replicas_for("cdi-plugin.io/tun") == 2  # the flag


BOTH_REFUSED = "one device could then go to two pods at once, one through each API"


@pytest.mark.parametrize(
    ("resources", "message"),
    [
        (
            '"cdi-plugin.io/usb-serial": {api: both}',
            "plugin.resources.cdi-plugin.io/usb-serial.api: both, but kind cdi-plugin.io/usb-serial is "
            "exclusive (replicas 1)",
        ),
        (
            '"cdi-plugin.io/*": {api: both, replicas: 4}, "cdi-plugin.io/usb-serial": {replicas: 1}',
            "plugin.resources.cdi-plugin.io/*.api: both, but kind cdi-plugin.io/usb-serial is exclusive",
        ),
        (
            '"cdi-plugin.io/usb-*": {replicas: 1}, "cdi-plugin.io/*": {api: both, replicas: 4}',
            "plugin.resources.cdi-plugin.io/*.api: both, but its kinds may be exclusive (replicas 1 from "
            "plugin.resources.cdi-plugin.io/usb-*)",
        ),
        (
            '"cdi-plugin.io/*": {api: both, replicas: 1}',
            "plugin.resources.cdi-plugin.io/*.api: both, but its kinds are exclusive (replicas 1)",
        ),
    ],
)
def test_an_exclusive_kind_named_for_both_apis_is_refused_in_one_line(resources: str, message: str) -> None:
    text = f"plugin:\n  resources: {{{resources}}}\n"
    with pytest.raises(ConfigError) as refused:
        _settings(text)
    assert str(refused.value).startswith(f"c.yaml: {message}")
    assert BOTH_REFUSED in str(refused.value)
    assert str(refused.value).endswith(
        "give it one API, replicas above 1 if it is shared, or set allowExclusiveKindsOnBothApis "
        "(--allow-exclusive-kinds-on-both-apis)"
    )
    assert "\n" not in str(refused.value)
    forced = _settings(text, api="both", allow_exclusive_kinds_on_both_apis=True)
    assert forced.serves("dra", "cdi-plugin.io/usb-serial")
    assert forced.serves("device-plugin", "cdi-plugin.io/usb-serial")
    allowed = _settings(text.replace("plugin:\n", f"plugin:\n  {ALLOW_BOTH_KEY}: true\n"), api="both")
    assert allowed.serves("dra", "cdi-plugin.io/usb-serial")


def test_globs_that_cannot_meet_do_not_make_a_shared_glob_refused() -> None:
    text = (
        'plugin:\n  resources: {"vendor.example/*": {replicas: 1}, '
        '"cdi-plugin.io/*": {api: both, replicas: 4}}\n'
    )
    assert _settings(text, api="both").serves("dra", "cdi-plugin.io/fuse")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (b'plugin: {resources: {"a/b": {api: grpc}}}', "c.yaml: plugin.resources.a/b.api: invalid 'api'"),
        (b"plugin: {allowExclusiveKindsOnBothApis: maybe}", "c.yaml: plugin.allowExclusiveKindsOnBothApis:"),
    ],
)
def test_bad_api_keys_name_the_key(text: bytes, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_config(text, "c.yaml")
    assert str(error.value).startswith(message)
