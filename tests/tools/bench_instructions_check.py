#!/usr/bin/env python3
"""Checks that bench/instructions.py (make bench-instructions) runs end to end: for the ZeroMQ and
HTTP paths it starts the supervisor under callgrind, sends requests whose answers it checks, and
reports a per-request count in a plausible range with five named functions. Exit 77: no valgrind.

usage: bench_instructions_check.py SOURCE_DIR BUILD_DIR
"""

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path


def main() -> int:
    source, build = Path(sys.argv[1]), Path(sys.argv[2])
    if not shutil.which("valgrind") or not shutil.which("callgrind_control"):
        print("valgrind not installed (tools/install-deps.sh installs it): skipped")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        run = subprocess.run(
            [sys.executable, str(source / "bench" / "instructions.py"), "--build-dir", str(build),
             "--paths", "zmq,http", "--requests", "30", "--warmup", "5", "--json", str(out)],
            capture_output=True, text=True, timeout=280)
        print(run.stdout[-3000:], run.stderr[-3000:])
        if run.returncode != 0:
            print(f"FAIL: exit {run.returncode}")
            return 1
        rows = json.loads(out.read_text())
    failures = []
    if [r["path"] for r in rows] != ["zmq", "http"]:
        failures.append(f"paths: expected zmq, http; got {[r['path'] for r in rows]}")
    for r in rows:
        # Thousands of instructions at the least (parse, route, reply); a count near zero or in
        # the tens of millions means the window or the division is wrong.
        if not 5_000 <= r["instructions_per_request"] <= 5_000_000:
            failures.append(f"{r['path']}: {r['instructions_per_request']} per request, "
                            "expected 5,000..5,000,000")
        # Every request takes at least one turn of the loop, and at c=1 at most a few (its
        # arrival, its answer, a timer now and then); zero means the turns were not found.
        if not 0.9 <= r["loop_turns_per_request"] <= 4:
            failures.append(f"{r['path']}: {r['loop_turns_per_request']} loop turns per request, "
                            "expected 0.9..4")
        names = [t["function"] for t in r["top"]]
        if len(names) != 5 or not all(names):
            failures.append(f"{r['path']}: expected five named functions, got {names}")
        if any("below main" in n or "libc_start_main" in n for n in names):
            failures.append(f"{r['path']}: frames charged whole to the stack's bottom: {names}")
    if rows and rows[1]["instructions_per_request"] <= rows[0]["instructions_per_request"]:
        failures.append("http counted below zmq: the HTTP path adds a front end to the same loop")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
