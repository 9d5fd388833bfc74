# The two set-up commands of README.md:
#   make run   installs what is missing, builds, writes the demo models and serves configs/demo.json
#   make test  installs what is missing, builds and runs the test suite (ctest)
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CTEST_ARGS ?=

.PHONY: all deps configure build models run test test-unit test-integration clean

all: build

deps:
	./tools/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

models: build
	$(BUILD_DIR)/bin/torchfarm-mkmodel --all models

run: models
	$(BUILD_DIR)/bin/torchfarm-supervisor --config configs/demo.json

test: build
	cd $(BUILD_DIR) && ctest --output-on-failure --timeout 900 $(CTEST_ARGS)

test-unit: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L unit $(CTEST_ARGS)

test-integration: build
	cd $(BUILD_DIR) && ctest --output-on-failure -L integration $(CTEST_ARGS)

clean:
	rm -rf $(BUILD_DIR) models
