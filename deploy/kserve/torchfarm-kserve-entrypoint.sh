#!/bin/sh
# torchfarm as a KServe model server: writes a farm config for the model KServe's storage
# initializer put in the model folder (/mnt/models), then execs
# `torchfarm-supervisor --config <that file>`.
#
# Owns: turning KServe's conventions (one model per pod, `--model_name={{.Name}}` and the model
# folder) into the farm's JSON config (common/config.h). It parses no JSON: it only splices the
# optional files below into the config it writes; the supervisor's parser validates the result and
# names the offending key.
#
# What the config gets:
#   http_endpoint 0.0.0.0:HTTP_PORT (8080), grpc_endpoint 0.0.0.0:GRPC_PORT (8081): KServe's
#     ingress, Knative's queue-proxy or the mesh sidecar sit in front and route to them;
#   "insecure": true: those front ends bind the pod address without TLS. KServe (Istio or the
#     Gateway, Knative's queue-proxy) authenticates and terminates TLS in front of the pod; the
#     pod network is the trust boundary (deploy/kserve/README.md, "Security");
#   endpoint (the ZeroMQ job socket) on loopback (tcp://127.0.0.1:5555): only a sidecar in the
#     same pod can use it; the admin socket in RUN_DIR (ipc, never on the network);
#   one model: name MODEL_NAME, path MODEL_DIR/model.pt (or the folder's only *.pt / *.pth file),
#     instances on DEVICE with WORKERS workers; every key of MODEL_DIR/config.json (a models[]
#     entry without name and path: inputs, outputs, instances, max_batch_size, ...) is spliced in.
#
# Settings: flags (KServe style --key=value; the InferenceService's args are appended to the
# runtime's, so a later flag wins) or environment variables:
#   --model_name        MODEL_NAME               the InferenceService name ({{.Name}}); default:
#                                                the model file's name without its extension
#   --model_dir         TORCHFARM_MODEL_DIR      /mnt/models
#   --model_config      TORCHFARM_MODEL_CONFIG   MODEL_DIR/config.json (used when it exists)
#   --inputs            TORCHFARM_INPUTS         JSON array for "inputs" when config.json has none
#   --device            TORCHFARM_DEVICE         auto: cuda:0 (fallback cpu) when /dev/nvidia0..N
#                                                exist (a GPU was allocated), else cpu
#   --workers           TORCHFARM_WORKERS        1 (workers of the model)
#   --threads           TORCHFARM_THREADS        1 (intra-op threads per worker)
#   --http_port         TORCHFARM_HTTP_PORT      8080 ("off": no HTTP front end)
#   --grpc_port         TORCHFARM_GRPC_PORT      8081 ("off": no gRPC front end)
#   --job_endpoint      TORCHFARM_JOB_ENDPOINT   tcp://127.0.0.1:5555
#   --run_dir           TORCHFARM_RUN_DIR        /tmp/torchfarm
#   --drain_timeout_ms  TORCHFARM_DRAIN_TIMEOUT_MS  20000 (below the pod's default 30 s grace)
#   --farm_config       TORCHFARM_FARM_CONFIG    optional JSON object whose members are added at
#                                                the top level (frontend, limits, gpu, restart, ...)
#   --config_out        TORCHFARM_CONFIG_OUT     RUN_DIR/torchfarm.json
#   --print_config                               write the config to stdout and exit (no exec)
#   TORCHFARM_SUPERVISOR  the supervisor binary (torchfarm-supervisor, from PATH)
# Exit status 2: a setting or the model folder is wrong (the message says which and why).
set -eu

fail() {
  echo "torchfarm-kserve-entrypoint: $*" >&2
  exit 2
}

model_name=${MODEL_NAME:-}
model_dir=${TORCHFARM_MODEL_DIR:-/mnt/models}
model_config=${TORCHFARM_MODEL_CONFIG:-}
inputs=${TORCHFARM_INPUTS:-}
device=${TORCHFARM_DEVICE:-auto}
workers=${TORCHFARM_WORKERS:-1}
threads=${TORCHFARM_THREADS:-1}
http_port=${TORCHFARM_HTTP_PORT:-8080}
grpc_port=${TORCHFARM_GRPC_PORT:-8081}
job_endpoint=${TORCHFARM_JOB_ENDPOINT:-tcp://127.0.0.1:5555}
run_dir=${TORCHFARM_RUN_DIR:-/tmp/torchfarm}
drain_timeout_ms=${TORCHFARM_DRAIN_TIMEOUT_MS:-20000}
farm_config=${TORCHFARM_FARM_CONFIG:-}
config_out=${TORCHFARM_CONFIG_OUT:-}
print_config=0

for arg in "$@"; do
  value=${arg#*=}
  case $arg in
    --model_name=*) model_name=$value ;;
    --model_dir=*) model_dir=$value ;;
    --model_config=*) model_config=$value ;;
    --inputs=*) inputs=$value ;;
    --device=*) device=$value ;;
    --workers=*) workers=$value ;;
    --threads=*) threads=$value ;;
    --http_port=*) http_port=$value ;;
    --grpc_port=*) grpc_port=$value ;;
    --job_endpoint=*) job_endpoint=$value ;;
    --run_dir=*) run_dir=$value ;;
    --drain_timeout_ms=*) drain_timeout_ms=$value ;;
    --farm_config=*) farm_config=$value ;;
    --config_out=*) config_out=$value ;;
    --print_config) print_config=1 ;;
    *) fail "unknown argument '$arg' (expected --key=value; see the header of this script)" ;;
  esac
done

# A value spliced into a JSON string must need no escaping.
plain() {  # plain WHAT VALUE
  case $2 in
    '' | *[!A-Za-z0-9._/:@+-]*)
      fail "$1: expected letters, digits and . _ / : @ + -, got '$2'" ;;
  esac
}
number() {  # number WHAT VALUE
  case $2 in
    '' | *[!0-9]*) fail "$1: expected a non-negative integer, got '$2'" ;;
  esac
}
port_or_off() {  # port_or_off WHAT VALUE
  [ "$2" = off ] && return 0
  number "$1" "$2"
  [ "$2" -ge 1 ] && [ "$2" -le 65535 ] || fail "$1: expected 1..65535 or off, got '$2'"
}

# The members of a JSON object file, without its outer braces (empty for {}).
object_members() {  # object_members WHAT FILE
  [ -r "$2" ] || fail "$1: cannot read '$2'"
  text=$(cat "$2")
  trimmed=$(printf '%s' "$text" | tr -d ' \t\r\n')
  case $trimmed in
    '{'*'}') ;;
    *) fail "$1 '$2': expected a JSON object {...}" ;;
  esac
  text=${text#*\{}
  text=${text%\}*}
  case $trimmed in
    '{}') printf '' ;;
    *) printf '%s' "$text" ;;
  esac
}
# True when the members (as text) carry KEY. A key is a string followed by a colon; tensor specs
# and instances carry none of the keys asked about here, so any match is the model's own.
has_key() {  # has_key MEMBERS KEY
  printf '%s' "$1" | tr '\n' ' ' | grep -q "\"$2\"[[:space:]]*:"
}

[ -d "$model_dir" ] || fail "model folder '$model_dir' does not exist (storageUri downloaded nothing?)"

# The model file: model.pt, else the folder's only *.pt or *.pth.
model_path=$model_dir/model.pt
if [ ! -f "$model_path" ]; then
  found=""
  count=0
  for candidate in "$model_dir"/*.pt "$model_dir"/*.pth; do
    [ -f "$candidate" ] || continue
    found=$candidate
    count=$((count + 1))
  done
  [ "$count" -eq 1 ] || fail "model folder '$model_dir': expected model.pt or exactly one *.pt" \
    "or *.pth file, found $count"
  model_path=$found
fi
plain "model path" "$model_path"

if [ -z "$model_name" ]; then
  model_name=$(basename "$model_path")
  model_name=${model_name%.*}
fi
plain "model name" "$model_name"
case $model_name in
  */* | *:* | *@* | *+*) fail "model name: expected letters, digits, '_', '-' or '.', got '$model_name'" ;;
esac

port_or_off "http port" "$http_port"
port_or_off "grpc port" "$grpc_port"
[ "$http_port" != off ] || [ "$grpc_port" != off ] || fail "http port and grpc port are both off"
[ "$http_port" = off ] || [ "$http_port" != "$grpc_port" ] || fail "http port and grpc port are both $http_port"
number "workers" "$workers"
number "threads" "$threads"
number "drain timeout" "$drain_timeout_ms"
plain "job endpoint" "$job_endpoint"
plain "run dir" "$run_dir"

model_members=""
[ -n "$model_config" ] || model_config=$model_dir/config.json
if [ -e "$model_config" ]; then
  model_members=$(object_members "model config" "$model_config")
  ! has_key "$model_members" path ||
    fail "model config '$model_config': has \"path\"; the model file is found in '$model_dir'"
fi

# Entry members written here; config.json's own inputs/instances take precedence (they are only
# written when config.json has none).
own=""
if ! has_key "$model_members" inputs; then
  [ -n "$inputs" ] || fail "model '$model_name': no inputs: put \"inputs\": [{\"name\", \"dtype\"," \
    "\"shape\"}, ...] in '$model_config' or pass --inputs='[...]' (TORCHFARM_INPUTS)"
  own="\"inputs\": $inputs"
fi
if ! has_key "$model_members" instances; then
  if [ "$device" = auto ]; then
    device=cpu
    for node in "${TORCHFARM_DEV_DIR:-/dev}"/nvidia[0-9]*; do
      [ -e "$node" ] && device=cuda:0 && break
    done
  fi
  plain "device" "$device"
  instance="{\"device\": \"$device\", \"count\": $workers, \"threads\": $threads"
  case $device in cuda*) instance="$instance, \"fallback\": \"cpu\"" ;; esac
  own="${own:+$own,
      }\"instances\": [$instance}]"
fi

farm_members=""
if [ -n "$farm_config" ]; then
  farm_members=$(object_members "farm config" "$farm_config")
  for key in endpoint run_dir insecure http_endpoint grpc_endpoint models; do
    ! has_key "$farm_members" "$key" ||
      fail "farm config '$farm_config': \"$key\" is written by this entrypoint; use its setting"
  done
fi

endpoints=""
[ "$http_port" = off ] || endpoints="\"http_endpoint\": \"0.0.0.0:$http_port\","
[ "$grpc_port" = off ] || endpoints="$endpoints
  \"grpc_endpoint\": \"0.0.0.0:$grpc_port\","

# name and path come last: a "name" in config.json is replaced by the InferenceService's (the
# config parser, like Python's json, keeps the last of repeated keys).
write_config() {
  cat <<EOF
{
  "endpoint": "$job_endpoint",
  "run_dir": "$run_dir",
  $endpoints
  "insecure": true,
  "drain_timeout_ms": $drain_timeout_ms,${farm_members:+
  $farm_members,}
  "models": [
    {${model_members:+
      $model_members,}${own:+
      $own,}
      "name": "$model_name",
      "path": "$model_path"
    }
  ]
}
EOF
}

if [ "$print_config" = 1 ]; then
  write_config
  exit 0
fi

[ -n "$config_out" ] || config_out=$run_dir/torchfarm.json
mkdir -p "$run_dir" "$(dirname "$config_out")"
write_config > "$config_out"
echo "torchfarm-kserve-entrypoint: model '$model_name' from $model_path, config $config_out" >&2
exec "${TORCHFARM_SUPERVISOR:-torchfarm-supervisor}" --config "$config_out"
