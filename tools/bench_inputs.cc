#include "tools/bench_inputs.h"

#include <algorithm>
#include <cstring>

namespace torchfarm {

namespace {

// Extra bytes past the input's length in its pool: the spread of the random window offsets.
uint64_t PoolSlack(uint64_t bytes) { return std::clamp<uint64_t>(bytes, 4096, 1 << 20); }

// IEEE half precision of a float in [-1, 1) (normal range only; no NaN/Inf can come out).
uint16_t ToHalf(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  if (exponent <= 0) return sign;  // too small for a normal half: zero
  return static_cast<uint16_t>(sign | (exponent << 10) | ((bits >> 13) & 0x3ff));
}

void FillRandom(DType dtype, std::mt19937_64& rng, std::string* pool) {
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  uint8_t* p = reinterpret_cast<uint8_t*>(pool->data());
  const size_t n = pool->size() / DTypeSize(dtype);
  for (size_t i = 0; i < n; ++i) {
    switch (dtype) {
      case DType::kFloat32: {
        float v = unit(rng);
        std::memcpy(p + 4 * i, &v, 4);
        break;
      }
      case DType::kFloat64: {
        double v = unit(rng);
        std::memcpy(p + 8 * i, &v, 8);
        break;
      }
      case DType::kFloat16: {
        uint16_t v = ToHalf(unit(rng));
        std::memcpy(p + 2 * i, &v, 2);
        break;
      }
      case DType::kBFloat16: {
        float f = unit(rng);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        uint16_t v = static_cast<uint16_t>(bits >> 16);
        std::memcpy(p + 2 * i, &v, 2);
        break;
      }
      case DType::kBool:
        p[i] = static_cast<uint8_t>(rng() & 1);
        break;
      default: {  // integers: random bytes of the item's width
        uint64_t v = rng();
        std::memcpy(p + DTypeSize(dtype) * i, &v, DTypeSize(dtype));
      }
    }
  }
}

// Makes element 0 unique to the request where the dtype can hold a counter exactly.
void Stamp(DType dtype, uint64_t counter, uint8_t* out, uint64_t bytes) {
  if (bytes < DTypeSize(dtype)) return;
  if (dtype == DType::kFloat32) {
    float v = static_cast<float>(counter & 0xffffff) / static_cast<float>(1 << 24);
    std::memcpy(out, &v, 4);
  } else if (dtype == DType::kFloat64) {
    double v = static_cast<double>(counter & 0xfffffffffffffull) / static_cast<double>(1ull << 52);
    std::memcpy(out, &v, 8);
  } else if (dtype == DType::kInt64 || dtype == DType::kInt32 || dtype == DType::kInt16) {
    std::memcpy(out, &counter, DTypeSize(dtype));
  }
}

}  // namespace

InputPool::InputPool(const std::vector<TensorSpec>& inputs, uint64_t seed) : specs_(inputs) {
  std::mt19937_64 rng(seed);
  for (const auto& spec : specs_) {
    uint64_t bytes = ByteSize(spec).value_or(0);
    bytes_.push_back(bytes);
    std::string pool(bytes + PoolSlack(bytes), '\0');
    FillRandom(spec.dtype, rng, &pool);
    pools_.push_back(std::move(pool));
  }
}

void InputPool::Fill(size_t index, uint64_t counter, std::mt19937_64& rng, uint8_t* out) const {
  const uint64_t bytes = bytes_[index];
  if (bytes == 0) return;
  const size_t item = DTypeSize(specs_[index].dtype);
  const uint64_t offsets = (pools_[index].size() - bytes) / item + 1;
  const uint64_t offset = (rng() % offsets) * item;
  std::memcpy(out, pools_[index].data() + offset, bytes);
  Stamp(specs_[index].dtype, counter, out, bytes);
}

}  // namespace torchfarm
