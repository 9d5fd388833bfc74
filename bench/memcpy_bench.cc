// memcpy bandwidth on this machine: the reference the farm's 16 MiB round trip is compared with.
// One thread, buffers allocated and touched once, so the figure is copy speed, not page faults.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

namespace torchfarm {
namespace {

void BM_Memcpy(benchmark::State& state) {
  const size_t bytes = static_cast<size_t>(state.range(0));
  std::vector<char> source(bytes, 1), destination(bytes, 0);
  for (auto _ : state) {
    std::memcpy(destination.data(), source.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(bytes));
}
BENCHMARK(BM_Memcpy)->Arg(4 << 10)->Arg(1 << 20)->Arg(16 << 20);

}  // namespace
}  // namespace torchfarm
