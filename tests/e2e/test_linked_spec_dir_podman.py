"""A spec directory that is a symbolic link, read by podman's CDI library and by ``cdi-gen list``:
podman resolves nothing from it (the library's walk does not follow the link), and ``list``, which
reads the directories as runtimes do, shows nothing from it either."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import pytest

from tests.e2e.podman import IMAGE, PodmanEnv

pytestmark = [pytest.mark.podman, pytest.mark.root]

SPEC = (
    '{"cdiVersion": "0.3.0", "kind": "example.com/linked", "devices": '
    '[{"name": "dev", "containerEdits": {"env": ["LINKED=1"]}}]}'
)


@pytest.mark.parametrize("linked", [False, True])
def test_podman_and_list_resolve_nothing_from_a_linked_spec_dir(
    podman_env: PodmanEnv, tmp_path: Path, linked: bool
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "linked.json").write_text(SPEC)
    if linked:  # in an overlay of /etc in the namespace, so that the host's /etc is never changed
        layer = tmp_path / "etc-layer"
        setup = (
            f"umount /etc/cdi\nmkdir -p {layer}/upper {layer}/work\n"
            f"mount -t overlay overlay -o lowerdir=/etc,upperdir={layer}/upper,workdir={layer}/work /etc\n"
            f"rm -rf /etc/cdi\nln -s {shlex.quote(str(real))} /etc/cdi\n"
        )
    else:
        setup = f"cp {shlex.quote(str(real / 'linked.json'))} /etc/cdi/\n"
    cdi_gen = shlex.join([sys.executable, "-m", "cdi_plugin", "list", "--spec-dir", "/etc/cdi"])
    script = (
        f"{setup}{cdi_gen} | cut -f1 > {shlex.quote(str(tmp_path / 'listed'))}\n"
        f"$PODMAN run --rm --device example.com/linked=dev {IMAGE} sh -c 'echo LINKED=$LINKED'\n"
    )
    result = podman_env.in_namespace(script)
    listed = (tmp_path / "listed").read_text().split()
    if linked:
        assert result.returncode != 0
        assert "unresolvable CDI devices example.com/linked=dev" in result.stderr
        assert listed == []
    else:
        assert (result.returncode, result.stdout.strip()) == (0, "LINKED=1"), result.stderr
        assert listed == ["example.com/linked=dev"]
