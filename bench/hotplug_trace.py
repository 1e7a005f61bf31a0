"""``bench_hotplug.py --trace``: ``cdi-plugin serve --scan`` run with time marks around its steps
(:data:`TRACER`), and the time of each step of a change (:data:`SEGMENTS`) or of a burst, read from
the marks."""

from __future__ import annotations

from hotplug_timeline import Burst, Moments

#: A mark this long before this process received the uevent counts: the watcher may read it first.
EARLY = 0.002

#: ``--trace``: ``cdi-plugin serve --scan`` run as usual, with time marks (start, end) around the
#: steps from the watcher's hand-over to the ListAndWatch bytes, written to a file at exit.
TRACER = """
import atexit, json, runpy, sys, time
import grpc
from cdi_plugin.deviceplugin import servicer
from cdi_plugin.deviceplugin.state import DeviceState
from cdi_plugin.discovery.udev import UdevSource
from cdi_plugin.inventory import source, spec_inventory
from cdi_plugin.scan import livespecs, pipeline, updates, watcher
from cdi_plugin.store import atomic, writer

marks, clock = [], time.perf_counter

def timed(label, call):
    def traced(*args, **kwargs):
        marks.append((label, 0, clock()))
        try:
            return call(*args, **kwargs)
        finally:
            marks.append((label, 1, clock()))
    return traced

for owner, name, label in (
    (watcher.Watcher, "_on_uevent", "uevent"), (updates.BatchWork, "run", "batch"),
    (UdevSource, "lookup", "lookup"), (livespecs.LiveSpec, "update", "entry"),
    (livespecs.LiveSpec, "render", "render"), (updates, "plan_updates", "plan"),
    (updates, "apply", "write"), (writer, "_verify", "verify"), (writer, "_stage", "stage"),
    (atomic.StagedFile, "commit", "commit"),
    (spec_inventory.SpecInventory, "accept", "handover"), (source.SpecSource, "current", "read"),
    (spec_inventory.SpecInventory, "_reconcile", "apply"),
    (spec_inventory.SpecInventory, "recheck_health", "nodes"),
    (DeviceState, "_show", "advertise"), (servicer.ListBuilder, "response", "response"),
    (UdevSource, "discover", "discover"), (pipeline, "build_specs", "build"),
    (pipeline, "plan_writes", "plan all"), (pipeline, "apply", "write all"),
    (updates.BatchWork, "_index", "index"), (watcher.Watcher, "_process", "process"),
):
    if hasattr(owner, name):  # the code measured may lack a step
        setattr(owner, name, timed(label, getattr(owner, name)))
stream_handler = grpc.unary_stream_rpc_method_handler

def traced_handler(behavior, request_deserializer=None, response_serializer=None):
    serialize = response_serializer or (lambda data: data)
    return stream_handler(behavior, request_deserializer, timed("serialize", serialize))

grpc.unary_stream_rpc_method_handler = traced_handler
out = sys.argv.pop(1)
atexit.register(lambda: open(out, "w").write(json.dumps(marks)))
runpy.run_module("cdi_plugin.cli.plugin", run_name="__main__")
"""


#: The steps of ``--trace``, in order: (label, from, to); a mark is (step, 0: start / 1: end), the
#: first of each between a change's uevent and its list.
SEGMENTS = (
    ("uevent -> the watcher reads it (loop)", "event", ("uevent", 0)),
    ("uevent read -> batch starts (worker thread)", ("uevent", 0), ("batch", 0)),
    ("device read from udev", ("lookup", 0), ("lookup", 1)),
    ("entry built and validated", ("entry", 0), ("entry", 1)),
    ("spec rendered (1000 entries)", ("render", 0), ("render", 1)),
    ("write planned (record, file read, hashed)", ("plan", 0), ("plan", 1)),
    ("write: checked again (record, file)", ("verify", 0), ("verify", 1)),
    ("write: file and record staged, fsynced", ("stage", 0), ("stage", 1)),
    ("staged -> spec file in place (renames)", ("stage", 1), "spec"),
    ("uevent -> spec file in place (watcher)", "event", "spec"),
    ("spec file -> hand-over (writer's tail, loop)", "spec", ("handover", 0)),
    ("hand-over -> reading starts (worker thread)", ("handover", 0), ("read", 0)),
    ("reading (registry, worker thread)", ("read", 0), ("read", 1)),
    ("reading -> applied on the loop", ("read", 1), ("apply", 0)),
    ("hand-over -> applied (total)", ("handover", 0), ("apply", 0)),
    ("inventory applies it (plugin state included)", ("apply", 0), ("apply", 1)),
    ("  of which the plugin's state (advertised IDs)", ("advertise", 0), ("advertise", 1)),
    ("/dev watch: uevent -> node re-checked", "event", ("nodes", 0)),
    ("/dev watch: node re-check (plugin state incl.)", ("nodes", 0), ("nodes", 1)),
    ("change applied -> stream builds its response", "applied", ("response", 0)),
    ("response built", ("response", 0), ("response", 1)),
    ("response -> serialized", ("response", 1), ("serialize", 1)),
    ("serialized -> bytes in the reader (gRPC)", ("serialize", 1), "arrived"),
    ("reader parses them (Python client)", "arrived", "listed"),
    ("spec file -> list parsed", "spec", "listed"),
)


def traced_steps(marks: list[tuple[str, int, float]], moments: list[Moments]) -> dict[str, list[float]]:
    """ms per step of :data:`SEGMENTS` for each change, from the marks of ``--trace`` that fall
    between its uevent and the bytes of its list (a step that did not happen for a change, such
    as the /dev watch's, is left out for it)."""
    out: dict[str, list[float]] = {label: [] for label, _, _ in SEGMENTS}
    for m in moments:
        at: dict[str | tuple[str, int], float] = {**m}
        for label, phase, t in marks:
            if m["event"] - EARLY <= t <= m["arrived"]:
                at.setdefault((label, phase), t)  # the first of each in the window
        # the change that made the list: the last one applied before the stream built it
        done = [
            at[k] for k in (("apply", 1), ("nodes", 1)) if k in at and at[k] <= at.get(("response", 0), 0)
        ]
        if done:
            at["applied"] = max(done)
        for label, start, end in SEGMENTS:
            if start in at and end in at and at[end] >= at[start]:
                out[label].append((at[end] - at[start]) * 1000)
    return out


def burst_steps(marks: list[tuple[str, int, float]], b: Burst) -> list[str]:
    """``--trace``: what ``serve --scan`` did from the burst's first uevent until it was served, in ms
    from its last uevent (negative: before it)."""
    out = []
    for label, phase, t in marks:
        if b.first <= t <= b.served + 0.001 and label not in ("response", "serialize", "uevent"):
            out.append(f"{(t - b.last) * 1000:+8.1f} {label} {'end' if phase else 'start'}")
    return out
