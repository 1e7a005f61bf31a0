"""A DRA claim for the host's /dev/fuse, on this machine without a cluster: cdi-gen scan -> spec
files -> the inventory -> the driver's ResourceSlice -> the DeviceClass `cdi-plugin dra-objects`
prints, its CEL selector evaluated as the scheduler evaluates it -> the example claim allocated
the device it picked -> the driver's answer to NodePrepareResources -> podman run --device with
those CDI names -> the example pod's command sees the host's /dev/fuse."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from cdi_plugin.cli import plugin
from cdi_plugin.dra.prepare import Claim, by_device_name, prepare_claim
from cdi_plugin.dra.slices import build_pool
from cdi_plugin.inventory import NumaLocator, SpecInventory, SpecSource
from tests.dra.cel import selects
from tests.e2e.podman import PodmanEnv
from tests.scan.helpers import run_cdi_gen

pytestmark = [pytest.mark.podman, pytest.mark.root]

DRIVER = "cdi-plugin.io"
NODE = "node-a"


def test_a_claim_from_the_printed_objects_gets_the_hosts_fuse_into_a_container(
    podman_env: PodmanEnv, tmp_path: Path
) -> None:
    specs = tmp_path / "cdi"
    run_cdi_gen("scan", "--output-dir", specs, check=0)
    printed = CliRunner().invoke(plugin.main, ["dra-objects", "--spec-dir", str(specs), "--examples"])
    assert printed.exit_code == 0, printed.output
    objects = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(printed.stdout)}
    device_class = objects["DeviceClass", "fuse.cdi-plugin.io"]
    template = objects["ResourceClaimTemplate", "fuse.cdi-plugin.io"]
    pod = objects["Pod", "fuse-dra-example"]

    inventory = SpecInventory(SpecSource([specs]), NumaLocator(), grace_period=300)
    inventory.sync()
    devices = inventory.devices()
    (selector,) = (s["cel"]["expression"] for s in device_class["spec"]["selectors"])
    published = [
        d for s in build_pool(DRIVER, NODE, devices, taints=True).slices(1) for d in s["spec"]["devices"]
    ]
    assert len(published) == len(devices) > 1  # fuse and the other kinds the host has
    (picked,) = (d["name"] for d in published if selects(selector, d, DRIVER))

    (request,) = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"]["deviceClassName"] == device_class["metadata"]["name"]
    ref = Claim("default", f"{pod['metadata']['name']}-{request['name']}-x7k2p", "3f1c8e2a-claim")
    claim = {
        "metadata": {"namespace": ref.namespace, "name": ref.name, "uid": ref.uid},
        "spec": {"devices": {"requests": [request]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": request["name"], "driver": DRIVER, "pool": NODE, "device": picked},
        ]}}},
    }  # fmt: skip
    prepared = prepare_claim(ref, claim, driver=DRIVER, pool=NODE, served=by_device_name(devices))
    assert not isinstance(prepared, str), prepared
    ((answer,),) = [prepared]
    assert answer.cdi_device_ids == ("cdi-plugin.io/fuse=fuse",)
    assert answer.request_names == (request["name"],)

    (container,) = pod["spec"]["containers"]
    ran = podman_env.run_container(
        list(answer.cdi_device_ids), shlex.join(container["command"]), spec_dir=specs
    )
    assert ran.returncode == 0, ran.stderr
    rdev = os.stat("/dev/fuse").st_rdev
    assert ran.stdout.split()[0].startswith("c")
    assert f"{os.major(rdev)}, {os.minor(rdev)}" in ran.stdout
    assert ran.stdout.rstrip().endswith("/dev/fuse")
