"""Renders docs/benchmarks.md from the summary of bench/suite_report.py."""
import json
import os


def _f(value, digits=0):
    if value is None:
        return "-"
    if isinstance(value, float) and value != value:  # NaN
        return "-"
    return ("{:,.%df}" % digits).format(value)


def _lat(step):
    """Three cells: p50, p99, p99.9 (the header spells them "p50 us | p99 us | p99.9 us")."""
    lat = step["latency_us"]
    return "%s | %s | %s" % (_f(lat["p50"], 1), _f(lat["p99"], 1), _f(lat["p999"], 1))


def _cpu(step):
    cpu = step.get("cpu_us_per_request")
    if not cpu:
        return "-"
    names = {"generator": "gen", "supervisor": "sup", "workers": "wrk", "echo": "echo"}
    return " / ".join("%s %.1f" % (names.get(k, k), v) for k, v in cpu.items())


def _table(header, rows):
    columns = sum(h.count(" | ") + 1 for h in header)  # a header cell may span several columns
    out = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in range(columns)) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def _overhead_section(s):
    o = s["overhead"]
    ip = o["inprocess"]
    rows = [["in-process `forward()` loop (no IPC)", "-", 1, _f(ip["per_s"]),
             "%s | %s | -" % (_f(ip["p50"], 1), _f(ip["p99"], 1)), "-", "-", ip["cmd"]]]
    for transport in ("ipc", "tcp"):
        x = o[transport]
        for label, key in (("bare ZeroMQ echo", "echo_c1"), ("farm", "farm_c1"),
                           ("farm, worker idle_spin_us 300", "farm_c1_spin"),
                           ("bare ZeroMQ echo", "echo_c64"), ("farm, batching on (max 64)", "farm_c64"),
                           ("farm, batching off", "farm_c64_nobatch")):
            if key not in x:
                continue
            st = x[key]
            rows.append([label, transport, st["concurrency"], _f(st["ok_per_s"]), _lat(st),
                         _f(st.get("mean_batch_size"), 2), _cpu(st), st["cmd"]])
    text = [_table(["target", "transport", "clients", "req/s", "p50 us | p99 us | p99.9 us",
                    "mean batch", "CPU us per request", "cmd"], rows), "",
            "CPU us per request: CPU time of each process (all its threads, `/proc/PID/stat` and "
            "`getrusage`) over the step, divided by the requests it sent; gen = `torchfarm bench`, "
            "sup = supervisor, wrk = all workers. On 2 cores these compete for the same CPUs.", ""]
    for transport in ("ipc", "tcp"):
        x = o[transport]
        text.append("- **%s**: the farm adds **%.0f us** at p50 (%.0f us at p99) per round trip over "
                    "the bare echo at c=1 (%.2fx the echo's p50); at c=64 it costs %.1f us more "
                    "per request than the echo (1/throughput)." % (
                        transport, x["added_us_p50"], x["added_us_p99"], x["p50_ratio"],
                        x["added_us_per_request_c64"]))
        if "farm_c1_spin" in x:
            text.append("  With the worker polling its ring for 300 us after answering "
                        "(`instances[].idle_spin_us` 300 set explicitly; since issue 19 the default "
                        "is the same window, adaptive: docs/benchmarks.md, issue 19) the round trip "
                        "is %.2fx the echo's p50 (%.0f us)." % (
                            x["p50_ratio_spin"], x["farm_c1_spin"]["latency_us"]["p50"]))
    g = o["generator"]
    text.append("- **Generator headroom**: against the echo the generator reaches %s req/s, %.1fx the "
                "farm's best %s req/s (target >= 3x). Its own cost is %.1f CPU us per request at c=64 "
                "(ipc), i.e. a capacity of about %s req/s per core it is given." % (
                    _f(g["echo_best"]), g["ratio"], _f(g["farm_best"]), g["gen_cpu_us"],
                    _f(1e6 / g["gen_cpu_us"] if g["gen_cpu_us"] else None)))
    return "\n".join(text)


def _throughput_section(s):
    parts = []
    for name, x in s["throughput"].items():
        rows = []
        for (workers, batching), st in sorted(x["farm"].items(), key=lambda kv: (kv[0][0], not kv[0][1])):
            rows.append(["farm, %d worker%s x 1 thread, batching %s" % (
                workers, "s" if workers > 1 else "", "on (max 16)" if batching else "off"),
                _f(st["ok_per_s"]), _lat(st), _f(st.get("mean_batch_size"), 2),
                "%.2fx" % (st["ok_per_s"] / x["inprocess_best"]), _cpu(st), st["cmd"]])
        rows.append(["in-process best: 1 process, %d intra-op thread%s, batch %d" % (
                         x["inprocess_threads"], "s" if x["inprocess_threads"] > 1 else "", x["inprocess_batch"]),
                     _f(x["inprocess_best"]), "- | - | -", x["inprocess_batch"], "1.00x", "-",
                     x["inprocess_cmd"]])
        parts.append("### %s\n\n" % name + _table(
            ["configuration (16 clients, batch-1 requests)", "rows/s", "p50 us | p99 us | p99.9 us",
             "mean batch", "vs in-process", "CPU us per request", "cmd"], rows))
        parts.append("Batching with 2 workers: **%.2fx** the throughput of batching off; latency cost "
                     "p50 %+.0f us, p99 %+.0f us." % (x["batching_gain_2w"], x["batching_p50_cost"],
                                                      x["batching_p99_cost"]))
    return "\n\n".join(parts)


def _inprocess_sweeps(results):
    parts = []
    for name, entry in results["throughput"].items():
        for ip in entry.get("inprocess_runs", [entry["inprocess"]]):
            rows = [[r["batch"], _f(r["rows_per_s"]), _f(r["latency_us"]["p50"], 1),
                     _f(r["latency_us"]["p99"], 1)] for r in ip["results"]]
            parts.append("%s, %d intra-op thread%s (%s):\n\n" % (
                name, ip["threads"], "s" if ip["threads"] > 1 else "", ip["cmd"]) +
                _table(["batch", "rows/s", "forward p50 us", "forward p99 us"], rows))
    return "\n\n".join(parts)


def _bandwidth_section(s):
    b = s["bandwidth"]
    rows = [["farm (identity, 1 worker, ipc)", _lat(b["farm"]), _f(b["farm_gbs"], 2), b["farm"]["cmd"]]]
    if b.get("farm_shm"):
        rows.append(["farm, client shared memory (identity, 1 worker, ipc)", _lat(b["farm_shm"]),
                     _f(b["farm_shm_gbs"], 2), b["farm_shm"]["cmd"]])
    rows += [["bare ZeroMQ echo (ipc)", _lat(b["echo"]), _f(b["echo_gbs"], 2), b["echo"]["cmd"]],
             ["memcpy, one thread", "- | - | -", _f(b["memcpy_gbs"], 2), b["memcpy_cmd"]]]
    text = "Farm round trip = **%.0f%%** of memcpy bandwidth with data frames" % (100 * b["ratio"])
    if b.get("farm_shm"):
        text += (", **%.0f%%** with client shared memory (`torchfarm bench --shm`: inputs and "
                 "outputs in a region the supervisor created, same farm)" % (100 * b["ratio_shm"]))
    text += "; the target (>= 40%%) judges the better path, here %s." % b["best"]["path"]
    return (_table(["16 MiB float32 round trip", "p50 us | p99 us | p99.9 us", "GB/s (16 MiB / p50)", "cmd"],
                   rows) + "\n\n" + text)


def _memory_section(s):
    m = s["memory"]
    rows = []
    for key, label in (("identity", "identity farm (1 worker)"), ("convnet", "convnet farm (2 workers)"),
                       ("bandwidth_16mib", "16 MiB identity farm (1 worker, 17 MiB slots)")):
        if key not in m:
            continue
        sup = m[key]["supervisor"]
        rows.append([label, "supervisor", _f(sup["VmRSS"] / 1024, 1), _f(sup.get("RssAnon", 0) / 1024, 1),
                     _f(sup.get("RssFile", 0) / 1024, 1), _f(sup.get("RssShmem", 0) / 1024, 1),
                     _f(sup.get("Pss", 0) / 1024, 1)])
        for i, w in enumerate(m[key]["workers"]):
            rows.append([label, "worker %d" % i, _f(w["VmRSS"] / 1024, 1), _f(w.get("RssAnon", 0) / 1024, 1),
                         _f(w.get("RssFile", 0) / 1024, 1), _f(w.get("RssShmem", 0) / 1024, 1),
                         _f(w.get("Pss", 0) / 1024, 1)])
        rows.append([label, "**total**", _f(m[key]["total_rss"] / 1024, 1), "", "", "",
                     _f(m[key]["total_pss"] / 1024, 1)])
    text = _table(["farm", "process", "RSS MiB", "anon", "file", "shmem", "PSS MiB"], rows)
    if "convnet_inprocess_rss" in m:
        text += ("\n\nOne in-process convnet (torchfarm-bench-inprocess, %s): RSS **%.1f MiB**; the "
                 "2-worker convnet farm in total: RSS %.1f MiB, PSS %.1f MiB (shared LibTorch pages "
                 "counted once)." % (m["convnet_inprocess_cmd"], m["convnet_inprocess_rss"] / 1024,
                                     m["convnet"]["total_rss"] / 1024, m["convnet"]["total_pss"] / 1024))
    text += ("\n\nMeasured from /proc/PID/status and smaps_rollup after each farm's load step. "
             "`shmem` is the part of the worker segments the process has touched.")
    return text


def _micro_section(s, results):
    rows = []
    for r in s["micro"]:
        rows.append([r["name"], _f(r["ns"], 1), _f(r["cpu_ns"], 1),
                     _f(r["items_per_s"] / 1e6, 2) if r["items_per_s"] else "-",
                     _f(r["bytes_per_s"] / 1e9, 2) if r["bytes_per_s"] else "-"])
    return _table(["benchmark", "wall ns/op", "CPU ns/op", "M items/s (CPU)", "GB/s (CPU)"], rows) + "\n\nAll from %s." % results["micro"]["cmd"]


def _targets_section(s):
    rows = [[name, value, wanted, "met" if met else "**missed**", cmd]
            for name, value, wanted, met, cmd in s["targets"]]
    return _table(["target", "measured", "wanted", "verdict", "cmd"], rows)


def markdown(machine, s, results, configs, commands, notes, args, analysis_path):
    out = ["# torchfarm benchmarks", "",
           "Written by `make bench` (bench/run_suite.py, Release build) on %s, commit `%s`. "
           "The whole suite ran in %.0f s; every step ran %.1f s after %.1f s of warm-up. "
           "Do not edit by hand: rerun `make bench`; the analysis comes from bench/analysis.md." % (
               machine["date"], machine["commit"], results.get("elapsed_s", 0),
               1.0 if args.quick else args.seconds, 0.5 if args.quick else args.warmup), "",
           "**Machine**: %s, %d cores, %.1f GiB memory, Linux %s; LibTorch %s (Debian), libzmq %s. "
           "Load generator, supervisor and workers share these cores, so every farm figure includes "
           "the generator's own CPU use. Load average (1 min) before the run %s, after %s: other "
           "work on the host shows up there." % (
               machine["cpu"], machine["cores"], machine["memory_gib"], machine["kernel"],
               machine["libtorch"], machine["libzmq"],
               _f((machine.get("loadavg_start") or [None])[0], 2),
               _f((machine.get("loadavg_end") or [None])[0], 2)),
           "", "Commands are cited as `Cn` and listed at the end; `$TMP` is the suite's scratch "
           "folder, config files are listed under *Farm configs*.", ""]
    for note in notes:
        out += ["> " + note, ""]
    out += ["## Targets", "", _targets_section(s), "",
            "## 1. Overhead: identity [1, 256] float32", "", _overhead_section(s), "",
            "## 2. Throughput: batch-1 requests, 16 clients", "", _throughput_section(s), "",
            "In-process sweeps (the baseline picks the best batch size):", "",
            _inprocess_sweeps(results), "",
            "## 3. Bandwidth: one 16 MiB tensor", "", _bandwidth_section(s), "",
            "## 4. Memory", "", _memory_section(s), "",
            "## 5. Micro-benchmarks (Google Benchmark)", "", _micro_section(s, results), ""]
    if os.path.exists(analysis_path):
        with open(analysis_path) as f:
            out += [f.read().strip(), ""]
    out += ["## Farm configs", ""]
    for name, config in configs.items():
        out += ["`%s`:" % name, "", "```json", json.dumps(config), "```", ""]
    out += ["## Commands", ""]
    out += ["- `C%d`: `%s`" % (i, text) for i, text in commands]
    return "\n".join(out) + "\n"
