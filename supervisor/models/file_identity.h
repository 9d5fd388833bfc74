// What a model file is, beyond its name: path, size, modification time and a hash of its bytes.
// A file rewritten in place under the same path (new weights) has another identity, so a reload
// notices it (reload_plan.h). Plain data plus one function that reads the file; no state.
//
// Runs on the supervisor's loop thread: a reload reads each model file once, whole, to hash it
// (a fast non-cryptographic 64-bit hash; a few hundred MB take a fraction of a second). The
// identity of each served model is kept in its ServedModel.
#pragma once

#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace torchfarm {

struct FileIdentity {
  std::string path;
  int64_t size = -1;      // -1: the file could not be read (error says why)
  int64_t mtime_ns = 0;   // st_mtim, nanoseconds since the epoch
  uint64_t hash = 0;      // ContentHash of the bytes
  std::string error;      // empty when read
  // What only the file system sets, for a cheap "unchanged" answer before any re-hash: a write
  // in place moves st_ctim even when it keeps the size and restores the mtime (cp -p), and a
  // file renamed over the path has another inode. Not part of ==: a touch is no new version.
  int64_t ctime_ns = 0;  // st_ctim
  uint64_t device = 0;   // st_dev
  uint64_t inode = 0;    // st_ino

  // True when `st` (a stat of `path`) shows the very file this identity was read from, with no
  // write since: then its bytes are this identity's without reading them.
  bool StatUnchanged(const struct stat& st) const;

  // Same file as far as a worker is concerned: same path, bytes and modification time. Two
  // unreadable files are the same when they fail the same way.
  bool operator==(const FileIdentity& other) const {
    return path == other.path && size == other.size && mtime_ns == other.mtime_ns &&
           hash == other.hash && error == other.error;
  }
  bool operator!=(const FileIdentity& other) const { return !(*this == other); }
  // "size 1234, hash 0123456789abcdef" or the error.
  std::string Describe() const;
};

// 64-bit hash of `size` bytes, seeded by `seed` (chain calls to hash a stream in pieces: pass the
// previous result as the seed). Not cryptographic: it tells versions apart, it resists no one.
uint64_t ContentHash(const void* data, size_t size, uint64_t seed = 0);

// Stats and hashes the file at `path`; an unreadable file gives an identity with `error` set.
FileIdentity ReadFileIdentity(const std::string& path);

}  // namespace torchfarm
