"""The watcher's retries: when rescans count as succeeding again."""

from __future__ import annotations

import asyncio
import logging

import pytest

from cdi_plugin.scan.retries import Retries
from cdi_plugin.scan.watcher import ALL

FUSE = "cdi-plugin.io/fuse"


def test_one_class_written_while_every_class_keeps_failing_is_no_recovery(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, "cdi_plugin")

    async def scenario() -> None:
        retries = Retries(lambda *keys: None)
        retries.failed({ALL}, None, "/etc/cdi: Permission denied")
        retries.succeeded({FUSE}, ALL)  # a uevent of FUSE's, rescanned and written meanwhile
        retries.cancel()
        retries.failed({ALL}, None, "/etc/cdi: Permission denied")  # the retry, failing as before
        assert "rescans succeed again" not in caplog.messages
        assert caplog.messages[-1].endswith("; retrying in 2s"), "the delay keeps growing"
        assert [r.levelno for r in caplog.records] == [logging.ERROR, logging.DEBUG], "said once"
        retries.cancel()
        retries.succeeded({ALL}, ALL)
        assert caplog.messages[-1] == "rescans succeed again"
        retries.failed({FUSE}, {FUSE}, "/etc/cdi: Permission denied")
        retries.cancel()
        assert caplog.messages[-1].endswith("; retrying in 1s"), "a new failure starts over"

    asyncio.run(scenario())
