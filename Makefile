# The two set-up commands of README.md:
#   make run   installs what is missing, builds, writes the demo models and serves configs/demo.json
#   make test  installs what is missing, builds and runs the test suite (ctest)
# and the benchmark suite (not part of make test):
#   make bench builds in Release (build-release), writes its models, runs bench/run_suite.py:
#              prints one table and writes docs/benchmarks.md. BENCH_ARGS=--quick shortens it.
#   make bench-peers  torchfarm beside TorchServe, Triton (PyTriton), Ray Serve and LitServe
#              (issue 31, bench/peers/): installs them into $(PEERS_VENV), ~35 min on 2 cores;
#              BENCH_ARGS=--quick (~6 min, docs left as they are), --json FILE for the rows.
BUILD_DIR ?= build
# The project's Python (tools/install-deps.sh: torch 2.15, torchvision, numpy, pyzmq, the client).
PYTHON ?= .venv/bin/python
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
PREFIX ?= /usr/local
CTEST_ARGS ?=

.PHONY: all deps configure build models models-real run-images run test test-unit test-integration test-soak bench bench-instructions bench-peers clean install \
        test-asan fuzz test-debian

all: build

deps:
	./tools/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

models: build
	$(BUILD_DIR)/bin/torchfarm-mkmodel --all models

# Real models for the image pipeline (issue 20): torchvision resnet18 and lraspp segmentation with
# random weights (nothing downloaded), their pre/post modules and an int8 quantize_dynamic MLP,
# into models/real (tools/export_image_models.py); configs/images.json serves them.
models-real:
	./tools/install-deps.sh
	$(PYTHON) tools/export_image_models.py --out models/real

run-images: build models-real
	$(BUILD_DIR)/bin/torchfarm-supervisor --config configs/images.json

run: models
	$(BUILD_DIR)/bin/torchfarm-supervisor --config configs/demo.json

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 900 $(CTEST_ARGS)

test-unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit $(CTEST_ARGS)

test-integration: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L integration $(CTEST_ARGS)

# The seeded randomised soak alone (~60 s): TORCHFARM_SOAK_SEED=N reproduces a printed seed.
test-soak: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L soak $(CTEST_ARGS)

BENCH_TARGETS = torchfarm torchfarm-supervisor torchfarm-worker torchfarm-mkmodel \
                torchfarm-bench-inprocess torchfarm-microbench
BENCH_ARGS ?=

# Supervisor instructions per request for each client path under callgrind (bench/instructions.py):
# deterministic, so it can run on a busy machine; about 1-2 minutes.
bench-instructions: build
	$(PYTHON) bench/instructions.py --build-dir $(BUILD_DIR) $(BENCH_ARGS)

bench:
	$(MAKE) configure BUILD_DIR=build-release BUILD_TYPE=Release
	cmake --build build-release -j $(JOBS) --target $(BENCH_TARGETS)
	$(PYTHON) bench/run_suite.py --build-dir build-release --out docs/benchmarks.md $(BENCH_ARGS)

# Issue 31 (docs/benchmarks.md, "Against other servers"): the peers go into their own venv (pinned
# by bench/peers/install_peers.sh, never .venv); a peer that fails to install is reported as not
# run, with install_peers.sh's last lines, and the rest still runs.
PEERS_VENV ?= $(BUILD_DIR)/peers-venv
PEER_MODELS ?= $(BUILD_DIR)/peer-models
PEER_TARGETS = torchfarm torchfarm-supervisor torchfarm-worker torchfarm-v2-http-load \
               torchfarm-http-echo

bench-peers:
	$(MAKE) configure BUILD_DIR=build-release BUILD_TYPE=Release
	cmake --build build-release -j $(JOBS) --target $(PEER_TARGETS)
	-cmake --build build-release -j $(JOBS) --target torchfarm-bench-grpc
	mkdir -p $(BUILD_DIR)
	-./bench/peers/install_peers.sh $(PEERS_VENV) 2>&1 | tee $(BUILD_DIR)/peers-install.log
	$(PYTHON) bench/peers/peer_models.py --out $(PEER_MODELS)
	$(PYTHON) bench/peers/bench_peers.py --build-dir build-release --peers-venv $(PEERS_VENV) \
	  --models-dir $(PEER_MODELS) --install-log $(BUILD_DIR)/peers-install.log \
	  --markdown docs/benchmarks.md $(BENCH_ARGS)

# Binaries, the C++ client + find_package(torchfarm) files, the Python client, configs, docs
# (layout: docs/clients.md).
install: build
	cmake --install $(BUILD_DIR) --prefix $(PREFIX)

clean:
	rm -rf $(BUILD_DIR) models

# The worker on Debian's LibTorch 1.13 (-DTORCHFARM_TORCH=debian, C++17) in build-debian: the
# worker, torchfarm-mkmodel and the worker's tests (the compute loop, the model runner's refusal
# of .pt2 packages, mkmodel's models), so the old path keeps building and serving (issue 29).
DEBIAN_DIR ?= build-debian
DEBIAN_TESTS = worker_compute_test worker_mkmodel_test model_runner_test aoti_package_info_test
test-debian: deps
	cmake -S . -B $(DEBIAN_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DTORCHFARM_TORCH=debian
	cmake --build $(DEBIAN_DIR) -j $(JOBS) --target torchfarm-worker torchfarm-mkmodel $(DEBIAN_TESTS)
	cd $(DEBIAN_DIR) && ctest --output-on-failure --timeout 900 \
	  -R '^($(subst $(eval) ,|,$(strip $(DEBIAN_TESTS))))$$' $(CTEST_ARGS)

# Security checks (docs/security.md); not part of make test.
#   make test-asan  ASan+UBSan build of the non-LibTorch parts in build-asan; runs their unit tests
#                   and the end-to-end security tests against a sanitized supervisor (the workers,
#                   torchfarm-mkmodel and the torchfarm CLI come unsanitized from $(BUILD_DIR)).
#   make fuzz       libFuzzer for FUZZ_SECONDS in all (clang-14, build-fuzz), split six ways
#                   between request intake (protocol_fuzzer), the ring slot decoders
#                   (slot_codec_fuzzer), the supervisor's reader of a worker's rings
#                   (ring_reader_fuzzer), the v2 HTTP request parser (v2_http_fuzzer), the v2 gRPC
#                   request conversion and the system shared memory parsers (v2_grpc_fuzzer) and
#                   the JPEG decoder (jpeg_fuzzer); crash inputs land in build-fuzz/artifacts/: copy them to
#                   tests/fuzz/regressions/, tests/fuzz/slot_codec_regressions/,
#                   tests/fuzz/ring_reader_corpus/, tests/fuzz/v2_regressions/ or
#                   tests/fuzz/jpeg_regressions/.
ASAN_DIR ?= build-asan
# -O1 -g1: what the sanitizers need (frames and line numbers in reports) at 2-3x less compile time
# than -O2 -g, which is most of CI's time; test code stays at -O0 (TORCHFARM_TEST_COMPILE_OPTIONS).
ASAN_OPT ?= -O1 -g1
ASAN_TESTS = common_test common_client_test ipc_test slot_codec_test supervisor_unit_test \
             fuzz_regression_test jpeg_decoder_test \
             security_test zero_copy_reply_test mps_test client_shm_test \
             v2_http_codec_test http_server_test kserve_v2_test
ASAN_TARGETS = torchfarm-supervisor $(ASAN_TESTS)
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60
# OSS-Fuzz's optimisation and debug level: line tables are all a crash report needs.
FUZZ_OPT ?= -O1 -gline-tables-only
# One total for the six fuzzers (the last takes the remainder); each gets at least a second.
FUZZ_PROTOCOL_SECONDS = $(shell s=$$(( $(FUZZ_SECONDS) / 6 )); echo $$(( s > 0 ? s : 1 )))
FUZZ_SLOT_SECONDS = $(shell s=$$(( $(FUZZ_SECONDS) / 6 )); echo $$(( s > 0 ? s : 1 )))
FUZZ_RING_SECONDS = $(shell s=$$(( $(FUZZ_SECONDS) / 6 )); echo $$(( s > 0 ? s : 1 )))
FUZZ_V2_SECONDS = $(shell s=$$(( $(FUZZ_SECONDS) / 6 )); echo $$(( s > 0 ? s : 1 )))
FUZZ_V2_GRPC_SECONDS = $(shell s=$$(( $(FUZZ_SECONDS) / 6 )); echo $$(( s > 0 ? s : 1 )))
FUZZ_JPEG_SECONDS = $(shell s=$$(( $(FUZZ_SECONDS) - 5 * ($(FUZZ_SECONDS) / 6) )); echo $$(( s > 0 ? s : 1 )))

test-asan: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target torchfarm-worker torchfarm-mkmodel torchfarm
	cmake -S . -B $(ASAN_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(ASAN_OPT) -DNDEBUG" -DTORCHFARM_SANITIZE=ON -DTORCHFARM_GRPC=OFF
	cmake --build $(ASAN_DIR) -j $(JOBS) --target $(ASAN_TARGETS)
	ln -sf $(abspath $(BUILD_DIR))/bin/torchfarm-worker $(ASAN_DIR)/bin/torchfarm-worker
	ln -sf $(abspath $(BUILD_DIR))/bin/torchfarm-mkmodel $(ASAN_DIR)/bin/torchfarm-mkmodel
	ln -sf $(abspath $(BUILD_DIR))/bin/torchfarm $(ASAN_DIR)/bin/torchfarm
	cd $(ASAN_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
	  LSAN_OPTIONS=suppressions=$(abspath tests/lsan.supp):print_suppressions=0 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --output-on-failure --timeout 900 -R '^($(subst $(eval) ,|,$(strip $(ASAN_TESTS))))$$' $(CTEST_ARGS)

fuzz:
	./tools/install-deps.sh --fuzz
	CC=clang-14 CXX=clang++-14 cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$(FUZZ_OPT) -DNDEBUG" -DTORCHFARM_FUZZ=ON
	cmake --build $(FUZZ_DIR) -j $(JOBS) --target protocol_fuzzer slot_codec_fuzzer v2_http_fuzzer \
	  v2_grpc_fuzzer jpeg_fuzzer ring_reader_fuzzer
	mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/slot_codec_corpus $(FUZZ_DIR)/v2_corpus \
	  $(FUZZ_DIR)/v2_grpc_corpus $(FUZZ_DIR)/jpeg_corpus $(FUZZ_DIR)/ring_reader_corpus \
	  $(FUZZ_DIR)/artifacts
	$(FUZZ_DIR)/bin/protocol_fuzzer -max_total_time=$(FUZZ_PROTOCOL_SECONDS) -max_len=80000 \
	  -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(FUZZ_DIR)/artifacts/ \
	  $(FUZZ_DIR)/corpus tests/fuzz/corpus
	$(FUZZ_DIR)/bin/slot_codec_fuzzer -max_total_time=$(FUZZ_SLOT_SECONDS) -max_len=8192 \
	  -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(FUZZ_DIR)/artifacts/slot-codec- \
	  $(FUZZ_DIR)/slot_codec_corpus tests/fuzz/slot_codec_corpus
	$(FUZZ_DIR)/bin/ring_reader_fuzzer -max_total_time=$(FUZZ_RING_SECONDS) -max_len=4096 \
	  -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(FUZZ_DIR)/artifacts/ring-reader- \
	  $(FUZZ_DIR)/ring_reader_corpus tests/fuzz/ring_reader_corpus
	$(FUZZ_DIR)/bin/v2_http_fuzzer -max_total_time=$(FUZZ_V2_SECONDS) -max_len=80000 \
	  -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(FUZZ_DIR)/artifacts/v2-http- \
	  $(FUZZ_DIR)/v2_corpus tests/fuzz/v2_corpus
	$(FUZZ_DIR)/bin/v2_grpc_fuzzer -max_total_time=$(FUZZ_V2_GRPC_SECONDS) -max_len=16384 \
	  -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(FUZZ_DIR)/artifacts/v2-grpc- \
	  $(FUZZ_DIR)/v2_grpc_corpus tests/fuzz/v2_grpc_corpus
	$(FUZZ_DIR)/bin/jpeg_fuzzer -max_total_time=$(FUZZ_JPEG_SECONDS) -max_len=16384 \
	  -timeout=10 -rss_limit_mb=2048 -artifact_prefix=$(FUZZ_DIR)/artifacts/jpeg- \
	  $(FUZZ_DIR)/jpeg_corpus tests/fuzz/jpeg_corpus
