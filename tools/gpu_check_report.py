#!/usr/bin/env python3
"""Turns what tools/gpu-check.sh collected into results.json and results.md.

    python3 tools/gpu_check_report.py RAW_DIR OUT_DIR

Reads RAW_DIR (written by gpu-check.sh, every file optional: a step that failed or was skipped
leaves its file out) and writes OUT_DIR/results.json (everything, raw outputs included) and
OUT_DIR/results.md (a section ready to paste into docs/benchmarks.md). Run after every step, so
a run cut short still leaves results that say which steps ran and which did not. Standard library
only: it runs under the GPU machine's Python, which is whatever its pip PyTorch came with.

RAW_DIR holds: plan.tsv (id, title: every step, in order), steps.tsv (id, title, status, seconds,
note: one row per finished step), current.tsv (id, title: the step running when the files were
last written; absent between steps), env.tsv (key, value), model.tsv, inprocess.json,
farm-<key>.json with farm-<key>.tsv (label, workers, mps, order) and farm-<key>-stats.json,
bandwidth.json, cmake-deps.txt, runtime-libs.txt.
"""
import datetime
import json
import os
import re
import sys


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def read_tsv(path):
    try:
        with open(path) as f:
            return [line.rstrip("\n").split("\t") for line in f if line.strip()]
    except OSError:
        return []


def read_lines(path):
    try:
        with open(path) as f:
            return [line.rstrip("\n") for line in f if line.strip()]
    except OSError:
        return []


def ms(us):
    return None if us is None else round(us / 1000.0, 2)


def fmt(value, unit=""):
    if value is None:
        return "-"
    if isinstance(value, float):
        value = f"{value:,.1f}" if value >= 100 else f"{value:.2f}"
    return f"{value}{unit}"


def inprocess_rows(inprocess):
    """Rows for batch 1 and the best batch size of torchfarm-bench-inprocess."""
    if not inprocess:
        return []
    rows = []
    by_batch = {r.get("batch"): r for r in inprocess.get("results", [])}
    best = inprocess.get("best") or {}
    picks = [("in-process, batch 1", by_batch.get(1))]
    if best and best.get("batch") != 1:
        picks.append((f"in-process, batch {best.get('batch')} (best)", best))
    for label, r in picks:
        if not r:
            continue
        latency = r.get("latency_us", {})
        rows.append({"configuration": label, "requests_per_s": r.get("rows_per_s"),
                     "p50_ms": ms(latency.get("p50")), "p99_ms": ms(latency.get("p99")),
                     "mean_batch": r.get("batch"), "errors": 0,
                     "note": "forward() only, inputs already on the device"})
    return rows


def device_note(stats):
    """What the supervisor's stats say about the workers' devices: MPS state, stage times."""
    if not isinstance(stats, dict):
        return ""
    parts = []
    gpu = stats.get("gpu")
    if isinstance(gpu, dict) and gpu.get("mps_state") is not None:
        state = re.sub(r" \([^)]{40,}\)", "", str(gpu["mps_state"]))  # drop long PATH lists
        parts.append(f"MPS {state.split(';')[0][:120]}")
    devices = [w.get("device_stats") for w in stats.get("workers", []) if isinstance(w, dict)]
    devices = [d for d in devices if isinstance(d, dict)]
    attached = [d.get("mps_attached") for d in devices if isinstance(d.get("mps_attached"), bool)]
    if attached:
        parts.append(f"{sum(attached)}/{len(attached)} workers on MPS")
    fallen_back = [w for w in stats.get("workers", []) if isinstance(w, dict) and w.get("fallback")]
    if fallen_back:
        parts.append(f"{len(fallen_back)} workers fell back to the CPU")
    compute = [d.get("mean_compute_us") for d in devices if d.get("mean_compute_us")]
    if compute:
        parts.append(f"compute {sum(compute) / len(compute) / 1000.0:.2f} ms/batch")
    return ", ".join(parts)


def farm_rows(raw):
    rows, runs = [], []
    metas = []
    for name in os.listdir(raw):
        if name.startswith("farm-") and name.endswith(".tsv"):
            fields = (read_tsv(os.path.join(raw, name)) or [[]])[0]
            metas.append((name[len("farm-"):-len(".tsv")],
                          dict(zip(("label", "workers", "mps", "order"), fields))))
    metas.sort(key=lambda m: int(m[1].get("order", 0) or 0))  # the order they ran in
    for key, meta in metas:
        bench = read_json(os.path.join(raw, f"farm-{key}.json"))
        stats = read_json(os.path.join(raw, f"farm-{key}-stats.json"))
        runs.append({"key": key, **meta, "bench": bench, "stats": stats})
        step = (bench or {}).get("steps", [{}])[0] if bench else {}
        latency = step.get("latency_us", {})
        note = device_note(stats)
        rows.append({"configuration": meta.get("label", key),
                     "requests_per_s": step.get("ok_per_s"),
                     "p50_ms": ms(latency.get("p50")), "p99_ms": ms(latency.get("p99")),
                     "mean_batch": step.get("mean_batch_size"),
                     "errors": step.get("error_count"), "note": note})
    return rows, runs


NOT_RUN = "not run"


def step_rows(plan, finished, current):
    """Every planned step with its outcome: a finished row, else "not run" with the reason.

    A step in current.tsv was running when the check stopped (it was killed, or its time ran out
    with the whole call's); the steps after it were never reached. Finished rows not in the plan
    (a plan from another version) are kept, after the planned ones.
    """
    by_id = {row["id"]: row for row in finished}
    current_id = current[0] if current else None
    rows, seen = [], set()
    for entry in plan:
        step_id, title = (entry + ["", ""])[:2]
        seen.add(step_id)
        if step_id in by_id:
            rows.append(by_id[step_id])
        elif step_id == current_id:
            rows.append({"id": step_id, "title": title, "status": NOT_RUN, "seconds": "",
                         "note": "was running when the check stopped (killed, or the call's "
                                 "time ran out): its output is in gpu-check.log"})
        else:
            rows.append({"id": step_id, "title": title, "status": NOT_RUN, "seconds": "",
                         "note": "not reached: the check stopped before it"})
    rows.extend(row for row in finished if row["id"] not in seen)
    return rows


def outcome_line(rows, current):
    counts = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    parts = [f"{counts[k]} {k}" for k in ("done", "skipped", "FAILED", NOT_RUN) if counts.get(k)]
    summary = ", ".join(parts) if parts else "no steps"
    if not rows:
        return "**Check: not started** (no plan.tsv)."
    if counts.get(NOT_RUN):
        if current:
            where = f"during step {current[0]} ({current[1] if len(current) > 1 else '?'})"
        else:
            last = [row for row in rows if row["status"] != NOT_RUN]
            where = f"after step {last[-1]['id']}" if last else "before step 1"
        return f"**Check: INCOMPLETE**: it stopped {where}. Steps: {summary}."
    state = "complete, with failures" if counts.get("FAILED") else "complete"
    out_of_time = [row["id"] for row in rows
                   if row["status"] == "skipped" and str(row.get("note", "")).startswith("time budget")]
    budget = f" The time budget ran out from step {out_of_time[0]} on." if out_of_time else ""
    return f"**Check: {state}**. Steps: {summary}.{budget}"


def markdown(doc):
    env = doc["environment"]
    model = doc.get("model", {})
    lines = []
    title = "GPU: {} {}, batch-1 requests, concurrency {}".format(
        model.get("name", "?"), model.get("precision", "?"), model.get("concurrency", "?"))
    if doc["rehearsal"]:
        title += " (REHEARSAL on a machine without a GPU: not a measurement)"
    lines.append(f"### {title}")
    lines.append("")
    lines.append(outcome_line(doc["steps"], doc["running"]))
    lines.append("")
    lines.append(f"Measured {doc['date']} by `bash tools/gpu-check.sh` (docs/gpu.md), budget "
                 f"{env.get('budget_s', '?')} s. GPU: {env.get('gpu', '-')}, driver "
                 f"{env.get('driver', '-')}; {env.get('nproc', '?')} cores; PyTorch "
                 f"{env.get('torch', '-')} (CUDA {env.get('torch_cuda', '-')}, C++11 ABI "
                 f"{env.get('cxx11_abi', '-')}, built as {env.get('cxx_standard', '-')}); nvcc "
                 f"{env.get('nvcc', '-')}; glibc {env.get('glibc', '-')}; {env.get('os', '-')}; "
                 f"/dev/shm {env.get('shm', '-')}.")
    if env.get("shm_plan"):
        lines.append(f"/dev/shm for the farm runs: {env['shm_plan']}.")
    if env.get("nvtx3_fallback"):
        lines.append("CMake: configured with CUDA::nvToolsExt standing for CUDA::nvtx3 "
                     "(tools/gpu-check-nvtx3.cmake).")
    lines.append("")
    lines.append("| step | status | seconds | why skipped / the error / the result |")
    lines.append("| --- | --- | ---: | --- |")
    for s in doc["steps"]:
        note = str(s.get("note", "")).replace("|", "/")
        lines.append(f"| {s['id']} {s['title']} | {s['status']} | {s['seconds']} | {note} |")
    lines.append("")
    lines.append(f"Model: `{model.get('file', '-')}` ({model.get('source', '-')}), input "
                 f"{model.get('shape', '-')}; {model.get('seconds', '?')} s measured after "
                 f"{model.get('warmup', '?')} s of warm-up per row.")
    lines.append("")
    lines.append("| configuration | req/s | p50 | p99 | mean batch | errors | note |")
    lines.append("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for r in doc["summary"]:
        lines.append("| {} | {} | {} | {} | {} | {} | {} |".format(
            r["configuration"], fmt(r["requests_per_s"]), fmt(r["p50_ms"], " ms"),
            fmt(r["p99_ms"], " ms"), fmt(r["mean_batch"]), fmt(r["errors"]), r.get("note", "")))
    if not doc["summary"]:
        lines.append("| (no benchmark finished: see the steps above) | | | | | | |")
    lines.append("")
    lines.append("In-process rows: rows/s and forward() latency of one process looping on the "
                 "GPU (torchfarm-bench-inprocess). Farm rows: replies/s and round-trip latency of "
                 "`torchfarm bench` clients sending one image per request.")
    lines.extend(bandwidth_lines(doc.get("bandwidth")))
    return "\n".join(lines) + "\n"


def bandwidth_lines(bw):
    if isinstance(bw, dict) and bw.get("results"):
        lines = ["", f"Host <-> device copies of {bw.get('bytes', 0) // (1 << 20)} MiB "
                     f"(torchfarm-gpu-bandwidth, {bw.get('iterations', '?')} copies each; "
                     f"cudaHostRegister took {fmt(bw.get('register_ms'), ' ms')}):",
                 "", "| host memory | H2D GB/s | D2H GB/s |", "| --- | ---: | ---: |"]
        names = {"pageable": "pageable: shm_open + mmap(MAP_SHARED), as the ring segment",
                 "registered": "the same segment after cudaHostRegister",
                 "pinned": "cudaMallocHost (reference)"}
        for r in bw["results"]:
            lines.append("| {} | {} | {} |".format(names.get(r.get("source"), r.get("source")),
                                                 fmt(r.get("h2d_gbps")), fmt(r.get("d2h_gbps"))))
        return lines
    if isinstance(bw, dict) and bw.get("error"):
        return ["", f"Bandwidth: not measured ({bw['error']})."]
    return []


def build_doc(raw):
    env = {row[0]: row[1] for row in read_tsv(os.path.join(raw, "env.tsv")) if len(row) >= 2}
    model = {row[0]: row[1] for row in read_tsv(os.path.join(raw, "model.tsv")) if len(row) >= 2}
    finished = [dict(zip(("id", "title", "status", "seconds", "note"), row + [""] * 5))
                for row in read_tsv(os.path.join(raw, "steps.tsv"))]
    plan = read_tsv(os.path.join(raw, "plan.tsv"))
    current = (read_tsv(os.path.join(raw, "current.tsv")) or [None])[0]
    steps = step_rows(plan, finished, current)
    inprocess = read_json(os.path.join(raw, "inprocess.json"))
    rows, runs = farm_rows(raw) if os.path.isdir(raw) else ([], [])
    return {
        "date": env.get("date") or datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "rehearsal": env.get("rehearsal") == "1",
        "complete": bool(steps) and all(s["status"] != NOT_RUN for s in steps),
        "running": current,
        "environment": env,
        "model": model,
        "steps": steps,
        "summary": inprocess_rows(inprocess) + rows,
        "inprocess": inprocess,
        "farm": runs,
        "bandwidth": read_json(os.path.join(raw, "bandwidth.json")),
        "cmake_dependencies": read_lines(os.path.join(raw, "cmake-deps.txt")),
        "runtime_libraries_from_prefix": read_lines(os.path.join(raw, "runtime-libs.txt")),
    }


def write_replacing(path, text):
    """Whole or not at all: the device tool may copy the file back at any moment."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    if len(sys.argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    raw, out = sys.argv[1], sys.argv[2]
    doc = build_doc(raw)
    write_replacing(os.path.join(out, "results.json"), json.dumps(doc, indent=2) + "\n")
    write_replacing(os.path.join(out, "results.md"), markdown(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
