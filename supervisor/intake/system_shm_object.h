// Opening a POSIX shared-memory object that a client registers through Triton's system shared
// memory extension (docs/kserve-v2.md, "System shared memory"; docs/security.md).
//
// Owns: the checks a client-chosen key gets before the supervisor maps it: the key is "/name"
// (one leading slash, no other, not "." or "..", at most 255 bytes, no NUL), the object is a
// regular file in the shm directory (/dev/shm) reached without following a symbolic link
// (O_NOFOLLOW), owned by the supervisor's own uid, and [offset, offset + byte_size) lies inside
// it. The object is opened twice (once to check, once by Boost to map); the two must be the same
// inode, so a swap between them is refused. Pure but for the file system; loop thread.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/status.h"
#include "ipc/shared_region.h"

namespace torchfarm {

inline constexpr const char* kShmDirectory = "/dev/shm";
inline constexpr size_t kMaxSystemShmKeyBytes = 255;

// OK for a key of the form "/name"; INVALID_ARGUMENT naming what was expected and what came.
Status CheckSystemShmKey(const std::string& key);

// Maps [offset, offset + byte_size) of the object `key` after the checks above (`owner`: the uid
// it must belong to, `directory`: where the system keeps shm objects). Errors: INVALID_ARGUMENT
// for a bad key, a symbolic link, a non-regular file, another owner or a range past the end;
// NOT_FOUND when no such object exists.
Status OpenSystemShmObject(const std::string& key, uint64_t offset, uint64_t byte_size, uid_t owner,
                           const std::string& directory, std::unique_ptr<ipc::SharedRegion>* out);

}  // namespace torchfarm
