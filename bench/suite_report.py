"""Turns the raw results of bench/run_suite.py into figures, target verdicts, one console table and
docs/benchmarks.md. Pure functions of the results; no processes are started here."""
import datetime
import json
import os
import platform
import subprocess

MIB = 1 << 20


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def machine_info(results):
    cpu = next((line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
                if line.startswith("model name")), platform.processor())
    mem_kib = next((int(line.split()[1]) for line in _read("/proc/meminfo").splitlines()
                    if line.startswith("MemTotal:")), 0)
    torch = results.get("overhead", {}).get("inprocess", {}).get("torch_version", "?")
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True,
                            cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))).stdout.strip()
    try:
        import zmq
        zmq_version = zmq.zmq_version()
    except ImportError:
        zmq_version = "?"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": round(mem_kib / MIB, 1),
            "libtorch": torch, "libzmq": zmq_version, "kernel": platform.release(),
            "commit": commit or "?", "loadavg_start": results.get("loadavg_start"),
            "loadavg_end": results.get("loadavg_end"), "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M")}


def _step(steps, concurrency):
    return next(s for s in steps if s["concurrency"] == concurrency)


def _ratio(a, b):
    return a / b if b else float("nan")


def _overhead(results):
    out = {}
    o = results["overhead"]
    inproc = o["inprocess"]["best"]
    out["inprocess"] = {"p50": inproc["latency_us"]["p50"], "p99": inproc["latency_us"]["p99"],
                        "per_s": inproc["forwards_per_s"], "cmd": o["inprocess"]["cmd"]}
    for transport in ("ipc", "tcp"):
        t = o[transport]
        echo1, echo64 = _step(t["echo"], 1), _step(t["echo"], 64)
        farm1, farm64 = _step(t["farm"], 1), _step(t["farm"], 64)
        off64 = _step(t["farm_nobatch"], 64)
        out[transport] = {
            "echo_c1": echo1, "echo_c64": echo64, "farm_c1": farm1, "farm_c64": farm64,
            "farm_c64_nobatch": off64,
            "p50_ratio": _ratio(farm1["latency_us"]["p50"], echo1["latency_us"]["p50"]),
            "added_us_p50": farm1["latency_us"]["p50"] - echo1["latency_us"]["p50"],
            "added_us_p99": farm1["latency_us"]["p99"] - echo1["latency_us"]["p99"],
            # CPU-bound at c=64: time per request of the farm minus that of the echo.
            "added_us_per_request_c64": 1e6 / farm64["ok_per_s"] - 1e6 / echo64["ok_per_s"],
        }
        if "farm_spin" in t:  # suites before instances[].idle_spin_us existed lack it
            spin1 = _step(t["farm_spin"], 1)
            out[transport]["farm_c1_spin"] = spin1
            out[transport]["p50_ratio_spin"] = _ratio(spin1["latency_us"]["p50"],
                                                      echo1["latency_us"]["p50"])
    best_farm = max(max(o[t]["farm"], key=lambda s: s["ok_per_s"])["ok_per_s"] for t in ("ipc", "tcp"))
    best_echo = max(_step(o[t]["echo"], 64)["ok_per_s"] for t in ("ipc", "tcp"))
    gen_cpu = _step(o["ipc"]["echo"], 64).get("cpu_us_per_request", {}).get("generator", 0)
    out["generator"] = {"echo_best": best_echo, "farm_best": best_farm,
                        "ratio": _ratio(best_echo, best_farm), "gen_cpu_us": gen_cpu}
    return out


def _throughput(results):
    out = {}
    for name, entry in results["throughput"].items():
        best = entry["inprocess"]["best"]
        farm = {(s["workers"], s["batching"]): s for s in entry["farm"]}
        best_farm = max(entry["farm"], key=lambda s: s["ok_per_s"])
        on, off = farm[(2, True)], farm[(2, False)]
        out[name] = {"inprocess_best": best["rows_per_s"], "inprocess_batch": best["batch"],
                     "inprocess_threads": entry["inprocess"]["threads"],
                     "inprocess_cmd": entry["inprocess"]["cmd"], "farm": farm,
                     "best_farm": best_farm,
                     "farm_vs_inprocess": _ratio(best_farm["ok_per_s"], best["rows_per_s"]),
                     "batching_gain_2w": _ratio(on["ok_per_s"], off["ok_per_s"]),
                     "batching_p50_cost": on["latency_us"]["p50"] - off["latency_us"]["p50"],
                     "batching_p99_cost": on["latency_us"]["p99"] - off["latency_us"]["p99"]}
    return out


def _micro(results):
    rows = []
    for b in results["micro"]["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
        rows.append({"name": b["name"], "ns": b["real_time"] * scale, "cpu_ns": b["cpu_time"] * scale,
                     "items_per_s": b.get("items_per_second"), "bytes_per_s": b.get("bytes_per_second")})
    return rows


def _bandwidth(results, micro):
    b = results["bandwidth"]
    # Wall-clock, like the farm's figure (Google Benchmark's bytes_per_second uses CPU time).
    memcpy = next((16 * MIB / (r["ns"] * 1e-9) for r in micro if r["name"] == "BM_Memcpy/16777216"), None)
    memcpy_gbs = (memcpy or 0) / 1e9

    def gbs(step):
        return b["bytes"] / (step["latency_us"]["p50"] * 1e-6) / 1e9

    out = {"farm_gbs": gbs(b["farm"]), "echo_gbs": gbs(b["echo"]), "memcpy_gbs": memcpy_gbs,
           "ratio": _ratio(gbs(b["farm"]), memcpy_gbs), "farm": b["farm"], "echo": b["echo"],
           "memcpy_cmd": results["micro"]["cmd"], "farm_shm": b.get("farm_shm")}
    # The target judges the better of the two farm paths (results saved before the shared-memory
    # row existed have only data frames).
    paths = [("data frames", b["farm"], out["farm_gbs"])]
    if out["farm_shm"]:
        out["farm_shm_gbs"] = gbs(out["farm_shm"])
        out["ratio_shm"] = _ratio(out["farm_shm_gbs"], memcpy_gbs)
        paths.append(("client shared memory", out["farm_shm"], out["farm_shm_gbs"]))
    name, step, best_gbs = max(paths, key=lambda p: p[2])
    out["best"] = {"path": name, "step": step, "gbs": best_gbs,
                   "ratio": _ratio(best_gbs, memcpy_gbs)}
    return out


def _memory(results):
    def farm_totals(memory):
        sup = memory["supervisor"]
        workers = memory["workers"]
        return {"supervisor": sup, "workers": workers,
                "total_rss": sup["VmRSS"] + sum(w["VmRSS"] for w in workers),
                "total_pss": sup.get("Pss", 0) + sum(w.get("Pss", 0) for w in workers)}
    out = {"identity": farm_totals(results["overhead"]["memory"]),
           "bandwidth_16mib": farm_totals(results["bandwidth"]["memory"])}
    if "memory_convnet" in results:
        out["convnet"] = farm_totals(results["memory_convnet"])
        out["convnet_inprocess_rss"] = results["throughput"]["convnet"]["inprocess"]["rss_kib"]
        out["convnet_inprocess_cmd"] = results["throughput"]["convnet"]["inprocess"]["cmd"]
    return out


def summarize(results):
    micro = _micro(results)
    s = {"overhead": _overhead(results), "throughput": _throughput(results), "micro": micro,
         "bandwidth": _bandwidth(results, micro), "memory": _memory(results)}
    s["targets"] = _targets(s)
    return s


def _bandwidth_target(b):
    """The 16 MiB row judges the better farm path and names it; both ratios are shown."""
    best = b["best"]
    both = "" if "ratio_shm" not in b else "; data frames %.0f%%, shared memory %.0f%%" % (
        100 * b["ratio"], 100 * b["ratio_shm"])
    return ("16 MiB round trip / memcpy bandwidth (better path)",
            "%.0f%% with %s (%.2f vs %.2f GB/s%s)" % (
                100 * best["ratio"], best["path"], best["gbs"], b["memcpy_gbs"], both),
            ">= 40%", best["ratio"] >= 0.4, "%s, %s" % (best["step"]["cmd"], b["memcpy_cmd"]))


def _latency_target(transport, x):
    """The c=1 row judges the better farm configuration (default, or the worker's idle spin) and
    names it; both ratios are shown."""
    configs = [("default", x["farm_c1"], x["p50_ratio"])]
    if "farm_c1_spin" in x:
        configs.append(("idle_spin_us 300", x["farm_c1_spin"], x["p50_ratio_spin"]))
    name, step, ratio = min(configs, key=lambda c: c[2])
    both = "" if len(configs) == 1 else "; default %.2fx, idle_spin_us 300 %.2fx" % (
        configs[0][2], configs[1][2])
    return ("identity p50 at c=1 vs bare ZeroMQ echo (%s)" % transport,
            "%.2fx with %s (%.0f vs %.0f us%s)" % (ratio, name, step["latency_us"]["p50"],
                                                  x["echo_c1"]["latency_us"]["p50"], both),
            "<= 1.4x", ratio <= 1.4, "%s, %s" % (step["cmd"], x["echo_c1"]["cmd"]))


def _targets(s):
    o, t, b, m = s["overhead"], s["throughput"], s["bandwidth"], s["memory"]
    targets = []
    for transport in ("ipc", "tcp"):
        targets.append(_latency_target(transport, o[transport]))
    best_identity = max((o[tr]["farm_c64"] for tr in ("ipc", "tcp")), key=lambda st: st["ok_per_s"])
    targets.append(("identity req/s at c=64 (batching)", "%.0f" % best_identity["ok_per_s"],
                    ">= 30000", best_identity["ok_per_s"] >= 30000, best_identity["cmd"]))
    if "convnet" in t:
        c = t["convnet"]
        targets.append(("convnet batch-1 c=16: farm / best in-process",
                        "%.2fx (%.0f vs %.0f rows/s)" % (c["farm_vs_inprocess"], c["best_farm"]["ok_per_s"],
                                                         c["inprocess_best"]),
                        ">= 0.9x", c["farm_vs_inprocess"] >= 0.9,
                        "%s, %s" % (c["best_farm"]["cmd"], c["inprocess_cmd"])))
    targets.append(_bandwidth_target(b))
    sup = max(m[k]["supervisor"]["VmRSS"] for k in ("identity", "convnet", "bandwidth_16mib") if k in m)
    sup_small = max(m[k]["supervisor"]["VmRSS"] for k in ("identity", "convnet") if k in m)
    targets.append(("supervisor RSS (small-tensor farms)", "%.1f MiB" % (sup_small / 1024), "< 32 MiB",
                    sup_small < 32 * 1024, "memory step"))
    targets.append(("supervisor RSS (16 MiB farm, shm slots touched)", "%.1f MiB" % (sup / 1024),
                    "< 32 MiB", sup < 32 * 1024, "memory step"))
    # RSS counts the worker segments' pages the supervisor touched (RssShmem, shared with the
    # worker and sized by slot_bytes x ring_slots); what the supervisor itself holds is RssAnon.
    farms = [k for k in ("identity", "convnet", "bandwidth_16mib") if k in m]
    if farms:
        worst = max(farms, key=lambda k: m[k]["supervisor"].get("RssAnon", 0))
        anon = m[worst]["supervisor"].get("RssAnon", 0)
        shmem = m[worst]["supervisor"].get("RssShmem", 0)
        targets.append(("supervisor private memory (RssAnon; any farm)",
                        "%.1f MiB (+ %.1f MiB shared RssShmem)" % (anon / 1024, shmem / 1024),
                        "< 32 MiB", anon < 32 * 1024, "memory step"))
    for name in ("mlp", "convnet"):
        if name in t:
            x = t[name]
            targets.append(("issue 3: %s 2x1-thread workers, batching on / off at c=16" % name,
                            "%.2fx" % x["batching_gain_2w"], ">= 1.5x", x["batching_gain_2w"] >= 1.5,
                            "%s, %s" % (x["farm"][(2, True)]["cmd"], x["farm"][(2, False)]["cmd"])))
    g = o["generator"]
    targets.append(("generator: echo c=64 / farm's best rate", "%.2fx (%.0f vs %.0f req/s)" % (
        g["ratio"], g["echo_best"], g["farm_best"]), ">= 3x", g["ratio"] >= 3, "overhead step"))
    return targets


def console_table(s):
    lines = ["", "%-62s %-34s %-10s %s" % ("target", "measured", "wanted", "met")]
    for name, value, wanted, met, _ in s["targets"]:
        lines.append("%-62s %-34s %-10s %s" % (name, value, wanted, "yes" if met else "NO"))
    return "\n".join(lines)


from suite_markdown import markdown  # noqa: E402,F401  (the long renderer lives in its own file)
