#include "tools/bench_shm_regions.h"

#include <algorithm>
#include <limits>

#include "common/log.h"

namespace torchfarm {

namespace {

uint64_t AlignUp(uint64_t value) {
  return (value + kShmOutputAlignment - 1) / kShmOutputAlignment * kShmOutputAlignment;
}

}  // namespace

BenchShmRegions::BenchShmRegions(std::string endpoint, std::string model,
                                 std::vector<TensorSpec> inputs, int depth, uint64_t output_bytes,
                                 int io_timeout_ms)
    : endpoint_(std::move(endpoint)),
      model_(std::move(model)),
      inputs_(std::move(inputs)),
      areas_(std::max(depth, 1)),
      io_timeout_ms_(io_timeout_ms) {
  // Inputs are laid out the way the supervisor lays out outputs (64-byte steps), which also
  // satisfies every dtype's item alignment.
  const ShmRef unbounded{"layout", 0, std::numeric_limits<uint64_t>::max()};
  uint64_t inputs_end = 0;
  if (PlaceOutputs(inputs_, unbounded, &input_offsets_).ok() && !inputs_.empty()) {
    inputs_end = input_offsets_.back() + ByteSize(inputs_.back()).value_or(0);
  }
  output_offset_ = AlignUp(inputs_end);
  output_bytes_ = std::max<uint64_t>(output_bytes > 0 ? output_bytes : inputs_end, 1);
  area_bytes_ = output_offset_ + AlignUp(output_bytes_);
}

BenchShmRegions::~BenchShmRegions() {
  if (Status s = Release(); !s.ok()) {
    TF_LOG(kWarn) << "cannot release a bench shared-memory region" << Kv("error", s.ToString());
  }
}

Status BenchShmRegions::Create(int clients) {
  client_ = std::make_unique<Client>(endpoint_, io_timeout_ms_);
  for (int c = 0; c < clients; ++c) {
    std::unique_ptr<ShmRegion> region;
    Status s = client_->CreateShm(region_bytes(), &region);
    if (!s.ok()) {
      Release();
      const char* hint =
          s.code() == StatusCode::kInternal
              ? " (is it a torchfarm supervisor? the echo server has no shared memory)"
              : "";
      return Status(s.code(), "--shm: cannot create shared-memory region " + std::to_string(c + 1) +
                                  " of " + std::to_string(clients) + " (" +
                                  std::to_string(region_bytes()) + " bytes) on " + endpoint_ +
                                  ": " + s.message() + hint);
    }
    std::vector<RequestTemplate> templates;
    for (int area = 0; area < areas_; ++area) {
      const uint64_t base = static_cast<uint64_t>(area) * area_bytes_;
      ShmPlacement placement;
      for (uint64_t offset : input_offsets_) placement.input_offsets.push_back(base + offset);
      placement.output = ShmRef{region->token(), base + output_offset_, output_bytes_};
      templates.emplace_back(model_, inputs_, placement);
    }
    regions_.push_back(std::move(region));
    templates_.push_back(std::move(templates));
  }
  return Status::Ok();
}

Status BenchShmRegions::Release() {
  Status first;
  for (auto& region : regions_) {
    Status s = region->Release();
    if (!s.ok() && first.ok()) first = s;
  }
  regions_.clear();
  templates_.clear();
  return first;
}

uint8_t* BenchShmRegions::InputAt(size_t client, int area, size_t input) const {
  return regions_[client]->data() + static_cast<uint64_t>(area) * area_bytes_ +
         input_offsets_[input];
}

const RequestTemplate& BenchShmRegions::Template(size_t client, int area) const {
  return templates_[client][static_cast<size_t>(area)];
}

ShmRef BenchShmRegions::OutputRange(size_t client, int area) const {
  return ShmRef{regions_[client]->token(),
                static_cast<uint64_t>(area) * area_bytes_ + output_offset_, output_bytes_};
}

bool BenchShmRegions::OutputsInArea(std::string_view header, size_t client, int area,
                                    uint64_t* bytes) const {
  return ShmOutputsInRange(header, OutputRange(client, area), bytes);
}

}  // namespace torchfarm
