"""Chrome-trace / Perfetto timelines of a simulated collective or workload run.

Tracks: one process per dimension with a thread per chunk (every step of the chunk as a
slice), and, when the run has at most :data:`MAX_FLOW_EVENTS` messages, one process for the
NPUs (a slice per message sent, on the sender's track) and one for the links (a slice per
message crossing each link). Times are in microseconds, as the format expects.
"""

from __future__ import annotations

import json
import os
from typing import Any

from .._io import write_text_atomic

MAX_FLOW_EVENTS = 200_000


def _slice(name: str, pid: str, tid: int, start_ns: float, end_ns: float,
           args: dict | None = None) -> dict[str, Any]:
    event = {"name": name, "ph": "X", "pid": pid, "tid": int(tid), "ts": start_ns / 1e3,
             "dur": max(end_ns - start_ns, 0.0) / 1e3}
    if args:
        event["args"] = args
    return event


def chrome_trace(log: list[dict], flow_times) -> dict[str, Any]:
    """Build the trace from the scheduler's step log.

    Parameters
    ----------
    log : list of dict
        One entry per step: ``template``, ``nbytes``, ``chunk``, ``phase``, ``step``,
        ``label``, ``dims``, ``start``, ``end``, ``token`` (the timer's handle of the step).
    flow_times : callable
        ``flow_times(entry) -> (start, send_end, arrival)`` arrays for the step's messages.
    """
    events: list[dict] = []
    total = sum(entry["template"].src.size for entry in log)
    with_flows = total <= MAX_FLOW_EVENTS
    for entry in log:
        dims = ",".join(str(d) for d in entry["dims"])
        events.append(_slice(f"{entry['label']} step {entry['step']}", f"dim {dims}",
                             entry["chunk"], entry["start"], entry["end"],
                             {"bytes per message": entry["nbytes"], "phase": entry["phase"]}))
        if not with_flows:
            continue
        template = entry["template"]
        start, send_end, arrival = flow_times(entry)
        for i in range(template.src.size):
            events.append(_slice(f"to {int(template.dst[i])}", "NPUs", int(template.src[i]),
                                 float(start[i]), float(arrival[i]),
                                 {"bytes": entry["nbytes"], "chunk": entry["chunk"]}))
            for link in template.links[template.indptr[i]: template.indptr[i + 1]]:
                events.append(_slice(f"{int(template.src[i])}->{int(template.dst[i])}",
                                     "links", int(link), float(start[i]), float(send_end[i])))
    return {"traceEvents": events, "displayTimeUnit": "ns",
            "otherData": {"flow_events": with_flows, "messages": total}}


def write_trace(trace: dict[str, Any], path: str | os.PathLike) -> None:
    """Write a trace atomically."""
    write_text_atomic(path, json.dumps(trace))


_LANES = {"compute": "compute", "memory": "memory"}


def workload_trace(timeline: list[dict], workload) -> dict:
    """Trace events of a workload run: per program (shown by its first NPU) a compute track, a
    memory track and as many communication tracks as it had collectives / messages in flight
    at once."""
    events = []
    lanes: dict[tuple[int, str], list[float]] = {}
    for entry in sorted(timeline, key=lambda e: e["start"]):
        op = entry["op"]
        pid = f"NPU {entry['npu']}" + ("" if len(workload.programs) == 1 else
                                       f" (program {entry['program']})")
        kind = _LANES.get(op.kind, "comm")
        free = lanes.setdefault((entry["program"], kind), [])
        lane = next((i for i, end in enumerate(free) if end <= entry["start"]), len(free))
        if lane == len(free):
            free.append(0.0)
        free[lane] = entry["end"]
        tid = {"compute": 0, "memory": 1}.get(kind, 2 + lane)
        layer = workload.layers[op.layer] if 0 <= op.layer < len(workload.layers) else ""
        args = {"kind": op.kind, "layer": layer, "pass": op.pass_}
        if op.size:
            args["bytes"] = op.size
        events.append(_slice(op.name or op.kind, pid, tid, entry["start"], entry["end"], args))
    return {"traceEvents": events, "displayTimeUnit": "ns"}
