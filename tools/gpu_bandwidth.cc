// torchfarm-gpu-bandwidth: how fast a worker can move a ring slot to the GPU. Copies one buffer
// host -> device (and back) with cudaMemcpyAsync from three kinds of host memory:
//   pageable    a shm_open + mmap(MAP_SHARED) segment, as the worker's ring segment is mapped;
//   registered  the same mapping after cudaHostRegister (what `pin_memory` does to the ring);
//   pinned      cudaMallocHost memory, the reference a registered segment should reach.
// CUDA runtime only (no LibTorch), so it builds wherever a CUDA toolkit is installed and runs
// wherever a driver and a device are. tools/gpu-check.sh runs it; docs/gpu.md shows its output.
//
//   torchfarm-gpu-bandwidth [--mib 256] [--iterations 10] [--device 0]
//
// Prints one JSON object on stdout. Exit codes: 0 ok, 1 a CUDA or OS call failed, 2 usage,
// 3 no CUDA device (the message says why: no driver, no device, ...).
//
// Owns: the segment, the device buffer, the pinned buffer, one stream and two events, each in an
// RAII holder; runs on the main thread.
#include <cuda_runtime_api.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

constexpr int kExitCudaOrOs = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoDevice = 3;

// A CUDA call that failed; main() turns it into exit code 1 and a JSON error.
struct CudaFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

void Check(cudaError_t error, const char* what) {
  if (error != cudaSuccess) {
    throw CudaFailure(std::string(what) + ": " + cudaGetErrorName(error) + " (" +
                      cudaGetErrorString(error) + ")");
  }
}

// A POSIX shared-memory segment mapped MAP_SHARED, like a worker's ring segment. The name is
// unlinked as soon as it is mapped, so nothing is left in /dev/shm if the program dies.
class SharedSegment {
 public:
  explicit SharedSegment(size_t bytes) : bytes_(bytes) {
    const std::string name = "/torchfarm-gpu-bandwidth-" + std::to_string(getpid());
    const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw std::runtime_error("shm_open " + name + ": " + std::strerror(errno));
    shm_unlink(name.c_str());
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      const int saved = errno;
      close(fd);
      throw std::runtime_error(std::string("ftruncate: ") + std::strerror(saved));
    }
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int saved = errno;
    close(fd);
    if (p == MAP_FAILED) throw std::runtime_error(std::string("mmap: ") + std::strerror(saved));
    data_ = p;
    std::memset(data_, 1, bytes_);  // fault every page in before timing
  }
  ~SharedSegment() { munmap(data_, bytes_); }
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  void* data() const { return data_; }

 private:
  size_t bytes_;
  void* data_ = nullptr;
};

// cudaHostRegister of memory someone else owns, undone on scope exit.
class HostRegistration {
 public:
  HostRegistration(void* p, size_t bytes) : p_(p) {
    Check(cudaHostRegister(p, bytes, cudaHostRegisterDefault), "cudaHostRegister");
  }
  ~HostRegistration() { cudaHostUnregister(p_); }
  HostRegistration(const HostRegistration&) = delete;
  HostRegistration& operator=(const HostRegistration&) = delete;

 private:
  void* p_;
};

// Memory from cudaMalloc (device) or cudaMallocHost (pinned host), freed on scope exit.
class CudaBuffer {
 public:
  enum class Kind { kDevice, kPinnedHost };
  CudaBuffer(Kind kind, size_t bytes) : kind_(kind) {
    if (kind == Kind::kDevice) {
      Check(cudaMalloc(&p_, bytes), "cudaMalloc");
    } else {
      Check(cudaMallocHost(&p_, bytes), "cudaMallocHost");
      std::memset(p_, 1, bytes);
    }
  }
  ~CudaBuffer() { kind_ == Kind::kDevice ? cudaFree(p_) : cudaFreeHost(p_); }
  CudaBuffer(const CudaBuffer&) = delete;
  CudaBuffer& operator=(const CudaBuffer&) = delete;
  void* data() const { return p_; }

 private:
  Kind kind_;
  void* p_ = nullptr;
};

// One stream and the two events that time the copies on it.
class CopyTimer {
 public:
  CopyTimer() {
    Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    Check(cudaEventCreate(&start_), "cudaEventCreate");
    Check(cudaEventCreate(&stop_), "cudaEventCreate");
  }
  ~CopyTimer() {
    cudaEventDestroy(stop_);
    cudaEventDestroy(start_);
    cudaStreamDestroy(stream_);
  }
  CopyTimer(const CopyTimer&) = delete;
  CopyTimer& operator=(const CopyTimer&) = delete;

  // GB/s (1e9 bytes) of `iterations` copies of `bytes`, after one untimed copy.
  double GigabytesPerSecond(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            int iterations) {
    Check(cudaMemcpyAsync(dst, src, bytes, kind, stream_), "cudaMemcpyAsync (warm-up)");
    Check(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
    Check(cudaEventRecord(start_, stream_), "cudaEventRecord");
    for (int i = 0; i < iterations; ++i) {
      Check(cudaMemcpyAsync(dst, src, bytes, kind, stream_), "cudaMemcpyAsync");
    }
    Check(cudaEventRecord(stop_, stream_), "cudaEventRecord");
    Check(cudaEventSynchronize(stop_), "cudaEventSynchronize");
    float ms = 0;
    Check(cudaEventElapsedTime(&ms, start_, stop_), "cudaEventElapsedTime");
    return static_cast<double>(bytes) * iterations / (ms / 1e3) / 1e9;
  }

 private:
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

struct Options {
  size_t mib = 256;
  int iterations = 10;
  int device = 0;
};

bool ParseOptions(int argc, char** argv, Options* out) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") return false;
    if (i + 1 >= argc) return false;
    const long value = std::strtol(argv[++i], nullptr, 10);
    if (value <= 0 && !(flag == "--device" && value == 0)) return false;
    if (flag == "--mib") {
      out->mib = static_cast<size_t>(value);
    } else if (flag == "--iterations") {
      out->iterations = static_cast<int>(value);
    } else if (flag == "--device") {
      out->device = static_cast<int>(value);
    } else {
      return false;
    }
  }
  return true;
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    out += (static_cast<unsigned char>(c) < 0x20) ? ' ' : c;
  }
  return out + "\"";
}

int PrintError(const std::string& message, int exit_code) {
  std::fprintf(stderr, "torchfarm-gpu-bandwidth: %s\n", message.c_str());
  std::printf("{\"error\": %s, \"exit_code\": %d}\n", JsonString(message).c_str(), exit_code);
  return exit_code;
}

struct Row {
  const char* source;
  double h2d_gbps;
  double d2h_gbps;
};

int Run(const Options& options) {
  int devices = 0;
  if (cudaError_t e = cudaGetDeviceCount(&devices); e != cudaSuccess || devices == 0) {
    const std::string why = e != cudaSuccess ? std::string(cudaGetErrorName(e)) + ": " +
                                                   cudaGetErrorString(e)
                                             : "the driver reports 0 devices";
    return PrintError("no CUDA device (" + why + ")", kExitNoDevice);
  }
  if (options.device >= devices) {
    return PrintError("no CUDA device " + std::to_string(options.device) + " (" +
                          std::to_string(devices) + " present)",
                      kExitNoDevice);
  }
  Check(cudaSetDevice(options.device), "cudaSetDevice");
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, options.device), "cudaGetDeviceProperties");

  const size_t bytes = options.mib << 20;
  CudaBuffer device_buffer(CudaBuffer::Kind::kDevice, bytes);
  SharedSegment segment(bytes);
  CopyTimer timer;
  auto measure = [&](const char* source, void* host) {
    return Row{source,
               timer.GigabytesPerSecond(device_buffer.data(), host, bytes,
                                        cudaMemcpyHostToDevice, options.iterations),
               timer.GigabytesPerSecond(host, device_buffer.data(), bytes,
                                        cudaMemcpyDeviceToHost, options.iterations)};
  };

  std::vector<Row> rows;
  rows.push_back(measure("pageable", segment.data()));
  double register_ms = 0;
  {
    const auto t0 = std::chrono::steady_clock::now();
    HostRegistration registration(segment.data(), bytes);
    register_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    rows.push_back(measure("registered", segment.data()));
  }
  {
    CudaBuffer pinned(CudaBuffer::Kind::kPinnedHost, bytes);
    rows.push_back(measure("pinned", pinned.data()));
  }

  int runtime_version = 0, driver_version = 0;
  cudaRuntimeGetVersion(&runtime_version);
  cudaDriverGetVersion(&driver_version);
  std::printf("{\n  \"device\": %s,\n  \"cuda_runtime\": %d,\n  \"cuda_driver\": %d,\n",
              JsonString(prop.name).c_str(), runtime_version, driver_version);
  std::printf("  \"bytes\": %zu,\n  \"iterations\": %d,\n  \"register_ms\": %.2f,\n", bytes,
              options.iterations, register_ms);
  std::printf("  \"results\": [\n");
  for (size_t i = 0; i < rows.size(); ++i) {
    std::printf("    {\"source\": \"%s\", \"h2d_gbps\": %.2f, \"d2h_gbps\": %.2f}%s\n",
                rows[i].source, rows[i].h2d_gbps, rows[i].d2h_gbps,
                i + 1 < rows.size() ? "," : "");
  }
  std::printf("  ]\n}\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!ParseOptions(argc, argv, &options)) {
    std::fprintf(stderr,
                 "usage: torchfarm-gpu-bandwidth [--mib 256] [--iterations 10] [--device 0]\n");
    return kExitUsage;
  }
  try {
    return Run(options);
  } catch (const std::exception& e) {
    return PrintError(e.what(), kExitCudaOrOs);
  }
}
