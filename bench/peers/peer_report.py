"""The "Against other servers" section of docs/benchmarks.md (issue 31), written from the rows
of bench/peers/bench_peers.py: the table (median over rounds), the goals at c=16, the generator's
ceiling, versions, configs, machine and what limits each figure. The section sits between two
markers and replaces its previous text; the rest of the file is left as it is."""
from __future__ import annotations

import os
import platform
import statistics
import subprocess
from pathlib import Path

BEGIN = "<!-- bench-peers: begin (written by make bench-peers; do not edit) -->"
END = "<!-- bench-peers: end -->"
PEER_PACKAGES = ("torch", "torchvision", "torchserve", "torch-model-archiver", "nvidia-pytriton",
                 "ray", "litserve")
# The goals at c=16 over HTTP: torchfarm's throughput over the best peer's.
GOALS = {"mlp": 3.0, "transformer": 1.5, "resnet18": 1.1}


def versions(peers_venv: Path, bin_dir: Path) -> dict:
    out = {}
    py = peers_venv / "bin" / "python"
    if py.exists():
        code = ("import importlib.metadata as m\n"
                f"for p in {PEER_PACKAGES!r}:\n"
                "    try: print(p, m.version(p))\n"
                "    except Exception: print(p, 'missing')\n")
        text = subprocess.run([str(py), "-c", code], capture_output=True, text=True).stdout
        out.update(dict(line.split(" ", 1) for line in text.splitlines() if " " in line))
        java = subprocess.run(["java", "-version"], capture_output=True, text=True)
        out["java"] = (java.stderr.splitlines() or ["missing"])[0]
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=Path(__file__).parent).stdout.strip()
    out["torchfarm"] = f"commit {commit or '?'}, {bin_dir}"
    return out


def machine() -> str:
    cpu = ""
    try:
        cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo")
                    if line.startswith("model name")), "")
    except OSError:
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return f"{cpu}, {os.cpu_count()} cores, {mem:.1f} GiB, Linux {platform.release()}"


def _median(rows, key):
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None


def _fmt(value, digits=1):
    return "-" if value is None else f"{value:.{digits}f}"


def aggregate(rows) -> list[dict]:
    """One row per (model, server, protocol, settings, concurrency): medians over the rounds,
    errors summed, notes joined."""
    groups = {}
    for r in rows:
        key = (r["model"], r["server"], r["protocol"], r["settings"], r["concurrency"],
               r.get("generator", "torchfarm-v2-http-load"))
        groups.setdefault(key, []).append(r)
    out = []
    for (model, server, protocol, settings, c, generator), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        shown = protocol if generator != "perf_analyzer" else "http (perf_analyzer)"
        out.append({"model": model, "server": server, "protocol": shown, "settings": settings,
                    "concurrency": c, "rounds": f"{len(ok)}/{len(rs)}",
                    "throughput_rps": _median(ok, "throughput_rps"), "p50_ms": _median(ok, "p50_ms"),
                    "p99_ms": _median(ok, "p99_ms"), "errors": sum(r["errors"] for r in rs),
                    "server_cpu": _median(ok, "server_cpu_s_per_1000"),
                    "generator_cpu": _median(ok, "generator_cpu_s_per_1000"),
                    "rss": _median(ok, "server_rss_mib"),
                    "checked": "; ".join(sorted({r["checked"] for r in rs if r["checked"]})),
                    "note": "; ".join(sorted({r["note"] for r in rs if r["note"]}))[:300]})
    return out


def table(agg) -> list[str]:
    lines = ["| model | server | protocol | settings | c | req/s | p50 ms | p99 ms | errors "
             "| server CPU s/1k | generator CPU s/1k | server RSS MiB | rounds | check / note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    order = {"torchfarm": 0, "torchserve": 1, "triton": 2, "rayserve": 3, "litserve": 4}
    for a in sorted(agg, key=lambda a: (a["model"], a["settings"], a["concurrency"],
                                        order.get(a["server"], 9), a["protocol"])):
        note = "; ".join(t for t in (a["checked"], a["note"]) if t).replace("|", "/")
        lines.append(f"| {a['model']} | {a['server']} | {a['protocol']} | {a['settings']} "
                     f"| {a['concurrency']} | {_fmt(a['throughput_rps'])} | {_fmt(a['p50_ms'], 2)} "
                     f"| {_fmt(a['p99_ms'], 2)} | {a['errors']} | {_fmt(a['server_cpu'], 2)} "
                     f"| {_fmt(a['generator_cpu'], 2)} | {_fmt(a['rss'], 0)} | {a['rounds']} "
                     f"| {note} |")
    return lines


def goals(agg) -> list[str]:
    """The issue's goals, from the HTTP rows: each server's best setting at c=16 and c=1."""
    lines = ["| model | goal | torchfarm | best peer | ratio | verdict |",
             "| --- | --- | --- | --- | --- | --- |"]

    def best(model, c, key, server_filter, better):
        cands = [a for a in agg if a["model"] == model and a["concurrency"] == c
                 and a["protocol"] == "http" and server_filter(a["server"])
                 and a[key] is not None and a["errors"] == 0 and a["throughput_rps"]]
        return better(cands, key=lambda a: a[key]) if cands else None

    for model, factor in GOALS.items():
        farm = best(model, 16, "throughput_rps", lambda s: s == "torchfarm", max)
        peer = best(model, 16, "throughput_rps", lambda s: s != "torchfarm", max)
        if farm and peer:
            ratio = farm["throughput_rps"] / peer["throughput_rps"]
            p99_ok = farm["p99_ms"] <= peer["p99_ms"]
            verdict = "met" if ratio >= factor and p99_ok else "**missed**"
            lines.append(f"| {model} | c=16 req/s >= {factor}x best peer, p99 <= its | "
                         f"{farm['throughput_rps']:.0f} req/s, p99 {farm['p99_ms']:.2f} ms "
                         f"({farm['settings']}) | {peer['server']} {peer['throughput_rps']:.0f} "
                         f"req/s, p99 {peer['p99_ms']:.2f} ms ({peer['settings']}) "
                         f"| {ratio:.2f}x | {verdict} |")
        if model == "resnet18":
            continue
        farm = best(model, 1, "p50_ms", lambda s: s == "torchfarm", min)
        peer = best(model, 1, "p50_ms", lambda s: s != "torchfarm", min)
        if farm and peer:
            verdict = "met" if farm["p50_ms"] < peer["p50_ms"] else "**missed**"
            lines.append(f"| {model} | c=1 p50 below every peer's | {farm['p50_ms']:.2f} ms | "
                         f"{peer['server']} {peer['p50_ms']:.2f} ms | "
                         f"{farm['p50_ms'] / peer['p50_ms']:.2f}x | {verdict} |")
    return lines


def section(rows, meta) -> str:
    agg = aggregate(rows)
    quiet = meta["load_before"] < 0.5 and not meta["quick"]
    head = [BEGIN, "## Against other servers (issue 31)", "",
            f"Written by `make bench-peers` (bench/peers/bench_peers.py) on {meta['started']}: "
            f"{meta['rounds']} round(s), {meta['seconds']:g} s per step after {meta['warmup']:g} s "
            f"of warm-up, {meta['elapsed_s'] / 60:.1f} min in all (expected "
            f"~{meta['expected_s'] / 60:.0f} min). Load average (1 min) before "
            f"{meta['load_before']:.2f}, after {meta['load_after']:.2f}.", ""]
    if not quiet:
        head += ["> **Functional run, not figures**: " +
                 ("`--quick`" if meta["quick"] else "the machine was busy (load average before "
                  f"{meta['load_before']:.2f})") +
                 ". Compare nothing below; rerun `make bench-peers` on a quiet machine.", ""]
    head += [f"**Machine**: {machine()}. Server, workers and the load generator share these "
             "cores: every figure includes the generator's own CPU.", "",
             "**Versions**: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()), "",
             "**Same for all**: the models of bench/peers/peer_models.py (TorchScript, random "
             "weights: mlp [1, 256], transformer encoder [1, 64, 256], resnet18 [1, 3, 224, 224]); "
             "batch-1 requests of one seeded input; one HTTP/1.1 keep-alive generator "
             "(torchfarm-v2-http-load) posting each server's natural request "
             "(bench/peers/peer_wire.py: v2 binary tensors to torchfarm and Triton, raw float32 "
             "bytes to TorchServe and Ray Serve, JSON + base64 to LitServe); the first round's "
             "c=1 answers checked against eager PyTorch.", "",
             "**Settings** (per model; default = the same for all, tuned = each server's guess "
             "for throughput, not searched):", "",
             "| server | default | tuned | not run because |", "| --- | --- | --- | --- |"]
    for server, s in meta["settings"].items():
        head.append(f"| {server} | {s['default']} | {s['tuned']} | "
                    f"{meta['blocked'].get(server) or '-'} |")
    ceiling = ["", "**The generator's ceiling** (torchfarm-http-echo, a bare Beast echo of mlp's "
               "v2 request, same machine): " + ", ".join(
                   f"c={c['concurrency']}: {c['throughput_rps']:.0f} req/s, p50 "
                   f"{c['p50_ms']:.3f} ms, generator {c['generator_cpu_s_per_1000']:.2f} "
                   "CPU s/1k" for c in meta["ceiling"]) + ".", ""]
    limits = ["", "**What limits these figures**: 2 cores shared by server, workers and generator "
              "(a server that burns CPU in its front end takes it from its own workers and from "
              "the generator); CPU s/1k counts warm-up too and only live processes of the server's "
              "tree; RSS is the sum over that tree (a page shared by several processes counts in each); "
              "each peer runs pip's torch 2.15 with oneDNN/MKL, torchfarm's worker the LibTorch "
              "it was built with; the tuned settings are first guesses from each server's docs. "
              "resnet18-jpeg (JPEG -> class) and perf_analyzer are not run by this tool.", ""]
    goal_lines = goals(agg)
    if any("**missed**" in line for line in goal_lines):
        goal_lines += ["", "Where a goal is missed, where torchfarm's time goes is not measured by "
                       "this tool: profile the supervisor and a worker at that load (`perf record "
                       "-g -p PID` while the step runs; bench/callgrind_per_request.sh for the "
                       "supervisor's instructions per request) and add the finding here."]
    return "\n".join(head + ceiling + ["### Goals (HTTP, best setting per server)", ""] +
                     goal_lines + ["", "### All rows (median over rounds)", ""] + table(agg) +
                     limits + [END]) + "\n"


def write_section(path: Path, text: str) -> None:
    old = path.read_text() if path.exists() else ""
    if BEGIN in old and END in old:
        start, end = old.index(BEGIN), old.index(END) + len(END)
        new = old[:start] + text.rstrip("\n") + old[end:]
    else:
        new = old.rstrip("\n") + "\n\n" + text
    path.write_text(new)
