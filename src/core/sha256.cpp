#include "u3d/core/sha256.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "u3d/core/errors.h"

namespace u3d {

struct Sha256::Context {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  ~Context() { EVP_MD_CTX_free(ctx); }
};

Sha256::Sha256() : ctx_(std::make_unique<Context>()) {
  if (!ctx_->ctx || EVP_DigestInit_ex(ctx_->ctx, EVP_sha256(), nullptr) != 1) {
    throw Error("SHA-256: libcrypto could not start a digest", kExitRuntime);
  }
}

Sha256::~Sha256() = default;

void Sha256::update(const void* data, size_t size) {
  if (finished_) throw Error("SHA-256: update after the digest was taken", kExitRuntime);
  if (size > 0 && EVP_DigestUpdate(ctx_->ctx, data, size) != 1) {
    throw Error("SHA-256: libcrypto failed to hash", kExitRuntime);
  }
}

std::array<uint8_t, 32> Sha256::digest() {
  if (finished_) return digest_;
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(ctx_->ctx, digest_.data(), &n) != 1 || n != digest_.size()) {
    throw Error("SHA-256: libcrypto failed to finish the digest", kExitRuntime);
  }
  finished_ = true;
  return digest_;
}

std::string Sha256::hex() {
  static const char* digits = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest()) {
    out += digits[b >> 4];
    out += digits[b & 15];
  }
  return out;
}

std::string sha256_hex(std::string_view data) {
  Sha256 h;
  h.update(data);
  return h.hex();
}

std::string sha256_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw IoError(fmt::format("{}: cannot open for reading: {}", path.string(), std::strerror(errno)));
  Sha256 h;
  std::vector<uint8_t> buf(size_t{1} << 20);
  while (true) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw IoError(fmt::format("{}: read failed: {}", path.string(), std::strerror(err)));
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return h.hex();
}

}  // namespace u3d
