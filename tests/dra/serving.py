"""The real ``cdi-plugin serve --api dra|both`` process on a stand-in node: temporary spec, device
plugin and kubelet plugin directories, a fake API server and a kubeconfig naming it."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.dra.conftest import DRIVER, NODE
from tests.dra.fakeapiserver import FakeApiServer
from tests.dra.fakekubelet import FakeKubelet
from tests.dra.rules import pool_problems

CDI_PLUGIN = Path(sys.executable).parent / "cdi-plugin"


def kubeconfig(path: Path, url: str, user: dict[str, Any] | None = None) -> Path:
    """A kubeconfig naming ``url``, its user's credentials ``user`` (by default a token)."""
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        "users": [{"name": "test", "user": user or {"token": "t"}}],
    }))  # fmt: skip
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sockets(directory: Path) -> list[str]:
    """The names of the unix sockets under ``directory`` (recursively)."""
    if not directory.exists():
        return []
    return sorted(
        str(p.relative_to(directory)) for p in directory.rglob("*") if stat.S_ISSOCK(p.lstat().st_mode)
    )


@dataclass
class DraNode:
    """Directories of one stand-in node. The kubelet's are short-named: gRPC binds a unix socket's
    path of at most 105 bytes."""

    specs: Path
    dev: Path
    kubelet: Path
    config: Path
    api: FakeApiServer = field(default_factory=FakeApiServer)

    @property
    def device_plugins(self) -> Path:
        return self.kubelet / "dp"

    @property
    def plugins(self) -> Path:
        return self.kubelet / "plugins"

    @property
    def registry(self) -> Path:
        return self.kubelet / "plugins_registry"

    @property
    def registration_socket(self) -> Path:
        return self.registry / f"{DRIVER}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.plugins / DRIVER / "dra.sock"

    def args(self, api: str, *extra: str, url: str = "", any_kind: bool = True) -> list[str]:
        """The command line; ``any_kind`` serves specs cdi-gen did not write too."""
        kubeconfig(self.config, url or self.api.url)
        return [
            str(CDI_PLUGIN), "serve", "--api", api, *(["--kind", "cdi-plugin.io/*"] if any_kind else []),
            "--spec-dir", str(self.specs), "--plugin-dir", str(self.device_plugins),
            "--kubelet-plugins-dir", str(self.plugins), "--kubelet-registry-dir", str(self.registry),
            "--kubeconfig", str(self.config), "--node-name", NODE, "--log-format", "json",
            *extra,
        ]  # fmt: skip

    def both_ways(self, kind: str = "cdi-plugin.io/fuse") -> list[str]:
        """Options serving ``kind`` through both APIs at once (its replicas is 1: it needs the option)."""
        path = self.config.with_name("config.yaml")
        path.write_text(f'plugin: {{resources: {{"{kind}": {{api: both}}}}}}\n')
        return ["--config", str(path), "--allow-exclusive-kinds-on-both-apis"]

    def kubelet_sockets(self) -> list[str]:
        return sockets(self.kubelet)


@pytest.fixture
def dra_node(tmp_path: Path) -> Iterator[DraNode]:
    kubelet = Path(tempfile.mkdtemp(prefix="dra-"))
    try:
        node = DraNode(tmp_path / "cdi", tmp_path / "dev", kubelet, tmp_path / "kubeconfig")
        node.dev.mkdir()
        node.device_plugins.mkdir()
        yield node
    finally:
        shutil.rmtree(kubelet)


class Serve:
    """A running ``cdi-plugin serve``; its stderr (JSON log lines) read as it comes."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, args: Sequence[str]) -> Serve:
        proc = await asyncio.create_subprocess_exec(
            *args, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        return cls(proc)

    async def _read(self) -> None:
        assert self.proc.stderr is not None
        async for line in self.proc.stderr:
            self.lines.append(line.decode().rstrip("\n"))

    def messages(self) -> list[str]:
        return [json.loads(line)["msg"] if line.startswith("{") else line for line in self.lines]

    async def wait_for(self, check: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
        """Poll ``check()`` until it is true (returned), the process ended, or ``timeout``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = check()
            if found:
                return found
            if self.proc.returncode is not None or loop.time() > deadline:
                ended = f"exited {self.proc.returncode}" if self.proc.returncode is not None else "running"
                raise AssertionError(
                    f"{what}: not within {timeout}s ({ended}); log:\n" + "\n".join(self.lines)
                )
            await asyncio.sleep(0.05)

    async def logged(self, text: str, timeout: float = 60.0) -> None:
        await self.wait_for(lambda: any(text in m for m in self.messages()), f"log {text!r}", timeout)

    async def stop(self) -> int:
        """SIGTERM, then the exit status."""
        if self.proc.returncode is None:
            self.proc.terminate()
        return await self.exit()

    async def exit(self, timeout: float = 60.0) -> int:
        try:
            code = await asyncio.wait_for(self.proc.wait(), timeout)
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
        await self._reader
        return code


def published(node: DraNode) -> dict[str, str]:
    """Device name -> kind attribute, in the slices the fake API server holds for this node and driver."""
    ours = [
        s for s in node.api.slices.values() if (s["spec"]["nodeName"], s["spec"]["driver"]) == (NODE, DRIVER)
    ]
    if not ours:
        return {}
    assert pool_problems(ours) == [], pool_problems(ours)
    return {d["name"]: d["attributes"]["kind"]["string"] for s in ours for d in s["spec"]["devices"]}


async def register(node: DraNode, serve: Serve) -> FakeKubelet:
    await serve.wait_for(node.registration_socket.exists, "registration socket")
    kubelet = FakeKubelet(node.registry)
    await kubelet.register(node.registration_socket, DRIVER)
    return kubelet
