// NumPy .npy files (format versions 1.0, 2.0 and 3.0) <-> TensorSpec + raw bytes.
//
// Owns: the .npy container layout (magic "\x93NUMPY", version, little-endian header length, a
// Python-literal header dict padded to 64 bytes, then the raw array bytes) and the wording of its
// errors. Used by the `torchfarm` CLI and tests; no process state, no LibTorch.
//
// Reading accepts what numpy.save writes: any key order, a trailing comma, shape () for scalars and
// (n,) for 1-D arrays, '<', '|' or '=' byte-order marks. Rejected with a message that says what to
// do: big-endian data, Fortran order (for rank >= 2; for rank <= 1 both orders are the same
// bytes), structured or unsupported dtypes, rank > kMaxRank, truncated or oversized data.
// Writing emits format 1.0, or 2.0 when the header does not fit 1.0's 16-bit length.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"
#include "common/tensor_spec.h"

namespace torchfarm {

// Parses the magic, version and header dict of `bytes` (a whole .npy file or at least its
// header); `*data_offset` receives where the array bytes begin. Does not check the data length.
Status ParseNpyHeader(std::string_view bytes, TensorSpec* spec, size_t* data_offset);

// Parses a whole .npy file held in memory; `*data` receives a copy of the array bytes.
Status ParseNpy(std::string_view bytes, TensorSpec* spec, std::string* data);

// The magic, version, length and padded header dict that precede the data of `spec`.
// bfloat16 has no numpy descriptor and is refused.
Status MakeNpyHeader(const TensorSpec& spec, std::string* header);

// Header + data in one buffer; `nbytes` must equal ByteSize(spec).
Status SerializeNpy(const TensorSpec& spec, const void* data, size_t nbytes, std::string* out);

// File variants; their messages start with the path.
Status ReadNpy(const std::string& path, TensorSpec* spec, std::string* data);
Status WriteNpy(const std::string& path, const TensorSpec& spec, const void* data, size_t nbytes);

}  // namespace torchfarm
