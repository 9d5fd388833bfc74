// JPEG decoding into RGB bytes with libturbojpeg, without LibTorch: the core of the pipeline's
// decode stage (worker/image_decoder.h wraps it as a tensor), also built alone by the fuzzer
// (tests/fuzz/jpeg_fuzzer.cc) and its unit test.
//
// Owns: one TurboJPEG decompressor per calling thread (a handle is not safe to share between
// threads), destroyed after any failed call on it and created afresh by the next decode, so a bad
// item leaves nothing behind for the next one (libturbojpeg 2.1 keeps a failed header's parser
// state: the next good JPEG on that handle would fail with "two SOI markers"); and the checks on
// what an image may cost, made before its pixels are allocated. Runs on the stage pool's threads
// (worker/thread_pool.h); safe on any thread.
//
// What decodes: baseline, progressive and arithmetic-coded 8-bit JPEGs in YCbCr, RGB or grayscale
// (into RGB by libturbojpeg), and CMYK/YCCK (decoded as CMYK, converted here: the naive
// R = (255 - C) * (255 - K) / 255, no colour management; with an Adobe APP14 marker the stored
// values are inverted, as Photoshop writes them and as PIL reads them).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace torchfarm::worker {

// Where the pixels go: called once per decode, after the header passed its checks, with the
// picture's size; returns width * height * 3 writable bytes, row-major RGB. May throw (an
// allocation failure): the decoder is left as after any failure.
using RgbDestination = std::function<uint8_t*(int width, int height)>;

// Decodes `jpeg` into the bytes `destination` returns; *width, *height its size. INVALID_ARGUMENT,
// naming what was expected and what was received, for data that is not a JPEG, a header
// libturbojpeg refuses, more than `max_pixels` pixels (checked on the frame header before
// libturbojpeg parses anything, and again on what it parsed), and truncated or corrupt data
// (libturbojpeg's warnings count as errors: a half-grey picture is no answer). On failure the
// destination's bytes are unspecified and the caller discards them. Messages stay short: a
// failed row's text travels in 88 bytes (ipc/shm_layout.h, kRowErrorTextBytes).
Status DecodeJpegRgb(std::string_view jpeg, uint64_t max_pixels, const RgbDestination& destination,
                     int* width, int* height);

// The same into `*rgb` (resized to width * height * 3; emptied on failure).
Status DecodeJpegRgb(std::string_view jpeg, uint64_t max_pixels, std::vector<uint8_t>* rgb,
                     int* width, int* height);

// What the segments before the first scan say, read without libturbojpeg (for the size check and
// the Adobe convention): the first frame header's size and component count, and whether an Adobe
// APP14 marker was seen. Walks whole segments only; stops at the first scan, at bytes that are
// not a marker, or at a segment running past the end (libturbojpeg then names the problem).
struct JpegMarkers {
  bool has_frame = false;
  int width = 0;
  int height = 0;
  int components = 0;
  bool adobe = false;
};
JpegMarkers ScanJpegMarkers(std::string_view jpeg);

}  // namespace torchfarm::worker
