// CURVE key files (docs/security.md): `torchfarm keygen --out NAME` writes NAME.key (the Z85
// public key, shareable) and NAME.key_secret (the Z85 secret key, mode 0600). The supervisor
// reads its secret key and a folder of client public keys; clients read their own pair and the
// server's public key. A key file holds one 40-character Z85 key; blank lines and lines starting
// with '#' are ignored, so a file may carry a comment naming its owner.
//
// Owns nothing; pure functions over files, used by the supervisor, the clients and the CLI.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "common/status.h"

namespace torchfarm {

inline constexpr size_t kCurveKeyZ85Length = 40;  // 32 bytes in Z85
inline constexpr const char* kPublicKeySuffix = ".key";
inline constexpr const char* kSecretKeySuffix = ".key_secret";

struct CurveKeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85
};

// True when `key` is 40 Z85 characters that decode to 32 bytes.
bool IsCurveKey(const std::string& key);
// A fresh pair from zmq_curve_keypair. Fails when libzmq was built without CURVE.
Status GenerateCurveKeyPair(CurveKeyPair* out);
// The public key of a Z85 secret key (zmq_curve_public).
Status CurvePublicKey(const std::string& secret_key, std::string* public_key);

// Reads the one key of a key file; errors name the file.
Status ReadCurveKeyFile(const std::string& path, std::string* key);
// Reads a secret key file, refusing one that group or others may read, and derives its public key.
Status ReadCurveSecretKeyFile(const std::string& path, CurveKeyPair* out);
// Writes <base>.key (0644) and <base>.key_secret (0600, never replacing an existing file).
Status WriteCurveKeyPair(const std::string& base, const CurveKeyPair& pair);

// The public keys of every "*.key" file in `dir`. A file that holds no valid key is skipped and
// described in `skipped`; a missing or unreadable folder is an error.
Status LoadAuthorizedKeys(const std::string& dir, std::set<std::string>* keys,
                          std::vector<std::string>* skipped);

}  // namespace torchfarm
