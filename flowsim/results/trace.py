"""Chrome-trace / Perfetto timelines of a simulated collective or workload run.

The format (the Trace Event Format) defines ``pid`` and ``tid`` as integers; every process and
thread is named by a ``process_name`` / ``thread_name`` metadata event, so tracks read "NPU 3"
or "chunk 2", not bare numbers. Times are in microseconds, as the format expects.

Collectives: one process per dimension with a thread per chunk (every step of the chunk as a
slice), and, when the run has at most :data:`MAX_FLOW_EVENTS` messages, one process for the
NPUs (a slice per message sent, on the sender's thread) and one for the links (a slice per
message crossing each link).

Workloads: one process per NPU (``pid`` = NPU id), with a compute thread, a memory thread and
as many communication threads as it had collectives / messages in flight at once. Every NPU
is there while the trace holds at most :data:`MAX_WORKLOAD_EVENTS` slices; beyond that it
keeps the first NPU of every program and then further NPUs in id order while they fit, and
says so in ``otherData`` (``npus_shown``, ``npus``).
"""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np

from .._io import write_text_atomic

#: Most messages a collective trace shows one by one.
MAX_FLOW_EVENTS = 200_000
#: Most op slices a workload trace holds (about 150 bytes each in the file).
MAX_WORKLOAD_EVENTS = 2_000_000
_LANE_NAMES = {0: "compute", 1: "memory"}


def _slice(name: str, pid: int, tid: int, start_ns: float, end_ns: float,
           args: dict | None = None) -> dict[str, Any]:
    event = {"name": name, "ph": "X", "pid": int(pid), "tid": int(tid), "ts": start_ns / 1e3,
             "dur": max(end_ns - start_ns, 0.0) / 1e3}
    if args:
        event["args"] = args
    return event


def _names(processes: dict[int, str], threads: dict[tuple[int, int], str]) -> list[dict]:
    """``process_name`` and ``thread_name`` metadata events (with sort indices, so tracks
    appear in id order)."""
    events: list[dict] = []
    for pid, name in sorted(processes.items()):
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": pid,
                       "args": {"sort_index": pid}})
    for (pid, tid), name in sorted(threads.items()):
        events.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"name": name}})
    return events


def chrome_trace(log: list[dict], flow_times) -> dict[str, Any]:
    """Build the trace of a collective from the scheduler's step log.

    Parameters
    ----------
    log : list of dict
        One entry per step: ``template``, ``nbytes``, ``chunk``, ``phase``, ``step``,
        ``label``, ``dims``, ``start``, ``end``, ``token`` (the timer's handle of the step).
    flow_times : callable
        ``flow_times(entry) -> (start, send_end, arrival)`` arrays for the step's messages.
    """
    events: list[dict] = []
    processes: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    dim_pid: dict[str, int] = {}
    total = sum(entry["template"].src.size for entry in log)
    with_flows = total <= MAX_FLOW_EVENTS
    for entry in log:
        dims = ",".join(str(d) for d in entry["dims"])
        pid = dim_pid.setdefault(dims, len(dim_pid))
        processes[pid] = f"dim {dims}"
        threads[(pid, entry["chunk"])] = f"chunk {entry['chunk']}"
        events.append(_slice(f"{entry['label']} step {entry['step']}", pid, entry["chunk"],
                             entry["start"], entry["end"],
                             {"bytes per message": entry["nbytes"], "phase": entry["phase"]}))
    npus_pid, links_pid = len(dim_pid), len(dim_pid) + 1
    for entry in log if with_flows else []:
        template = entry["template"]
        start, send_end, arrival = flow_times(entry)
        for i in range(template.src.size):
            src, dst = int(template.src[i]), int(template.dst[i])
            processes[npus_pid] = "NPUs"
            threads[(npus_pid, src)] = f"NPU {src}"
            events.append(_slice(f"to {dst}", npus_pid, src, float(start[i]),
                                 float(arrival[i]),
                                 {"bytes": entry["nbytes"], "chunk": entry["chunk"]}))
            for link in template.links[template.indptr[i]: template.indptr[i + 1]]:
                processes[links_pid] = "links"
                threads[(links_pid, int(link))] = f"link {int(link)}"
                events.append(_slice(f"{src}->{dst}", links_pid, int(link), float(start[i]),
                                     float(send_end[i])))
    return {"traceEvents": _names(processes, threads) + events, "displayTimeUnit": "ns",
            "otherData": {"flow_events": with_flows, "messages": total}}


def write_trace(trace: dict[str, Any], path: str | os.PathLike) -> None:
    """Write a trace atomically."""
    write_text_atomic(path, json.dumps(trace))


def _shown_npus(timeline: list[dict], npus: int) -> np.ndarray:
    """NPUs the workload trace shows (a mask): all while their slices fit in
    :data:`MAX_WORKLOAD_EVENTS`; else every program's first NPU, then more in id order."""
    per_npu = np.zeros(npus, np.int64)
    first = np.zeros(npus, bool)
    for entry in timeline:
        np.add.at(per_npu, entry["npus"], 1)
        first[entry["npus"][0]] = True
    if per_npu.sum() <= MAX_WORKLOAD_EVENTS:
        return per_npu > 0
    budget = MAX_WORKLOAD_EVENTS - int(per_npu[first].sum())
    extra = ~first & (per_npu > 0)
    fits = np.cumsum(np.where(extra, per_npu, 0)) <= budget
    return first | (extra & fits)


def workload_trace(timeline: list[dict], workload) -> dict:
    """Trace events of a workload run (see the module docstring for its tracks and bound)."""
    npus = max((int(e["npus"].max()) + 1 for e in timeline), default=0)
    shown = _shown_npus(timeline, npus)
    rows = []   # (npu, start, end, entry)
    for entry in timeline:
        keep = shown[entry["npus"]]
        for npu, start, end in zip(entry["npus"][keep].tolist(),
                                   np.broadcast_to(entry["start"], keep.shape)[keep].tolist(),
                                   np.broadcast_to(entry["end"], keep.shape)[keep].tolist()):
            rows.append((npu, start, end, entry))
    rows.sort(key=lambda r: (r[0], r[1]))
    events, processes, threads = [], {}, {}
    lanes: dict[tuple[int, str], list[float]] = {}
    multi = len(workload.programs) > 1
    for npu, start, end, entry in rows:
        op = entry["op"]
        kind = op.kind if op.kind in ("compute", "memory") else "comm"
        free = lanes.setdefault((npu, kind), [])
        lane = next((i for i, t in enumerate(free) if t <= start), len(free))
        if lane == len(free):
            free.append(0.0)
        free[lane] = end
        tid = {"compute": 0, "memory": 1}.get(kind, 2 + lane)
        processes[npu] = f"NPU {npu}" + (f" (program {entry['program']})" if multi else "")
        threads[(npu, tid)] = _LANE_NAMES.get(tid, f"comm {tid - 2}")
        layer = workload.layers[op.layer] if 0 <= op.layer < len(workload.layers) else ""
        args = {"kind": op.kind, "layer": layer, "pass": op.pass_}
        if op.size:
            args["bytes"] = op.size
        events.append(_slice(op.name or op.kind, npu, tid, start, end, args))
    active = np.zeros(npus, bool)
    for entry in timeline:
        active[entry["npus"]] = True
    return {"traceEvents": _names(processes, threads) + events, "displayTimeUnit": "ns",
            "otherData": {"npus": int(active.sum()), "npus_shown": int(shown.sum())}}
