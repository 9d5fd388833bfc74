#include "common/curve_keys.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zmq.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace torchfarm {

namespace fs = std::filesystem;

namespace {

std::string Trim(const std::string& text) {
  size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  size_t end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Creates `path` with `mode` (O_EXCL when `exclusive`) and writes `text` to it.
Status WriteFile(const std::string& path, const std::string& text, mode_t mode, bool exclusive) {
  int flags = O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW | (exclusive ? O_EXCL : O_TRUNC);
  int fd = ::open(path.c_str(), flags, mode);
  if (fd < 0) {
    return Internal("cannot create '" + path + "': " + std::strerror(errno) +
                    (errno == EEXIST ? " (refusing to replace an existing secret key)" : ""));
  }
  // The mode given to open() passes through the umask; set it exactly.
  bool ok = ::fchmod(fd, mode) == 0;
  size_t written = 0;
  while (ok && written < text.size()) {
    ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) written += static_cast<size_t>(n);
  }
  ok = ::close(fd) == 0 && ok;
  return ok ? Status::Ok() : Internal("cannot write '" + path + "': " + std::strerror(errno));
}

}  // namespace

bool IsCurveKey(const std::string& key) {
  if (key.size() != kCurveKeyZ85Length) return false;
  uint8_t binary[32];
  return zmq_z85_decode(binary, key.c_str()) != nullptr;
}

Status GenerateCurveKeyPair(CurveKeyPair* out) {
  char public_key[41], secret_key[41];
  if (zmq_curve_keypair(public_key, secret_key) != 0) {
    return Unavailable(std::string("zmq_curve_keypair failed: ") + zmq_strerror(zmq_errno()) +
                       " (libzmq built without CURVE?)");
  }
  out->public_key = public_key;
  out->secret_key = secret_key;
  return Status::Ok();
}

Status CurvePublicKey(const std::string& secret_key, std::string* public_key) {
  if (!IsCurveKey(secret_key)) return InvalidArgument("not a 40-character Z85 CURVE key");
  char buffer[41];
  if (zmq_curve_public(buffer, secret_key.c_str()) != 0) {
    return Unavailable(std::string("zmq_curve_public failed: ") + zmq_strerror(zmq_errno()));
  }
  *public_key = buffer;
  return Status::Ok();
}

Status ReadCurveKeyFile(const std::string& path, std::string* key) {
  std::ifstream in(path);
  if (!in) return NotFound("cannot open key file '" + path + "': " + std::strerror(errno));
  std::string line;
  // A key file is a few lines; refuse to read a large file that cannot be one.
  for (int lines = 0; lines < 64 && std::getline(in, line); ++lines) {
    line = Trim(line);
    if (line.empty() || line[0] == '#') continue;
    if (!IsCurveKey(line)) {
      return InvalidArgument("key file '" + path + "' does not hold a 40-character Z85 CURVE key");
    }
    *key = line;
    return Status::Ok();
  }
  return InvalidArgument("key file '" + path + "' holds no key");
}

Status ReadCurveSecretKeyFile(const std::string& path, CurveKeyPair* out) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    return NotFound("cannot read secret key file '" + path + "': " + std::strerror(errno));
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return InvalidArgument("secret key file '" + path + "' has mode " + mode +
                           "; group and others must not read it (chmod 600 '" + path + "')");
  }
  CurveKeyPair pair;
  if (Status s = ReadCurveKeyFile(path, &pair.secret_key); !s.ok()) return s;
  if (Status s = CurvePublicKey(pair.secret_key, &pair.public_key); !s.ok()) {
    return Status(s.code(), "secret key file '" + path + "': " + s.message());
  }
  *out = std::move(pair);
  return Status::Ok();
}

Status WriteCurveKeyPair(const std::string& base, const CurveKeyPair& pair) {
  std::string secret_path = base + kSecretKeySuffix;
  std::string public_path = base + kPublicKeySuffix;
  const std::string name = fs::path(base).filename().string();
  Status s = WriteFile(
      secret_path,
      "# torchfarm CURVE secret key of '" + name + "': keep it private\n" + pair.secret_key + "\n",
      0600, /*exclusive=*/true);
  if (!s.ok()) return s;
  return WriteFile(public_path,
                   "# torchfarm CURVE public key of '" + name + "'\n" + pair.public_key + "\n",
                   0644, /*exclusive=*/false);
}

Status LoadAuthorizedKeys(const std::string& dir, std::set<std::string>* keys,
                          std::vector<std::string>* skipped) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return NotFound("cannot read authorized_clients_dir '" + dir + "': " + ec.message());
  std::set<std::string> found;
  for (const auto& entry : it) {
    const std::string path = entry.path().string();
    if (!EndsWith(path, kPublicKeySuffix)) continue;
    if (!entry.is_regular_file(ec)) {
      skipped->push_back(path + ": not a regular file");
      continue;
    }
    std::string key;
    if (Status s = ReadCurveKeyFile(path, &key); !s.ok()) {
      skipped->push_back(s.message());
      continue;
    }
    found.insert(key);
  }
  *keys = std::move(found);
  return Status::Ok();
}

}  // namespace torchfarm
