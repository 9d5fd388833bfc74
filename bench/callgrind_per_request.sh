#!/usr/bin/env bash
# Supervisor instructions per request (callgrind): identity [1,256], one exec'd worker, c=1.
# usage: bench/callgrind_per_request.sh SUPERVISOR_BIN LABEL N   (run it for N=500 and N=2500;
#        per request = (Ir(2500) - Ir(500)) / 2000, which cancels start-up and shutdown)
# Needs valgrind, a built tree (build/bin: the worker, mkmodel) and .venv (pyzmq, numpy).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
sup=$1; label=$2; n=$3
dir=/tmp/cg/$label-$n; rm -rf $dir; mkdir -p $dir
[ -f /tmp/cg/models/identity.pt ] || $root/build/bin/torchfarm-mkmodel --all /tmp/cg/models >/dev/null
cat > $dir/cfg.json <<JSON
{"endpoint": "ipc://$dir/jobs.sock", "admin_endpoint": "ipc://$dir/admin.sock", "run_dir": "$dir/run",
 "worker_launch": "exec", "worker_binary": "$root/build/bin/torchfarm-worker",
 "models": [{"name": "identity", "path": "/tmp/cg/models/identity.pt",
   "inputs": [{"dtype": "float32", "shape": [-1, 256]}], "instances": [{"device": "cpu", "count": 1}]}]}
JSON
valgrind --tool=callgrind --callgrind-out-file=$dir/cg.out $sup --config $dir/cfg.json --log-level warn > $dir/sup.log 2>&1 &
vpid=$!
$root/.venv/bin/python - "$dir" "$n" <<'PY'
import sys, time, zmq, json, numpy as np
d, n = sys.argv[1], int(sys.argv[2])
ctx = zmq.Context(); s = ctx.socket(zmq.DEALER); s.connect(f"ipc://{d}/jobs.sock")
x = np.zeros((1, 256), np.float32)
def one(i, timeout):
    s.send_multipart([json.dumps({"v": 1, "id": i, "model": "identity",
                                  "inputs": [{"dtype": "float32", "shape": [1, 256]}]}).encode(), x.tobytes()])
    if not s.poll(timeout): return False
    frames = s.recv_multipart(); return json.loads(frames[0])["status"] == "ok"
deadline = time.time() + 120
while not one(-1, 2000):
    if time.time() > deadline: sys.exit("not ready")
for i in range(200): assert one(i, 10000)
for i in range(n): assert one(1000 + i, 10000)
print("sent", n)
PY
kill -TERM $vpid; wait $vpid || true
grep -E "^summary|^totals" $dir/cg.out | head -2
