// SHA-256 (FIPS 180-4), streaming: the content hash of checkpoints in their manifest, and of the
// training case ids. OpenSSL's libcrypto computes it (EVP interface; it uses the CPU's SHA
// extensions on x86 and ARM where present); tested against the FIPS vectors.
//
//   Sha256 h;
//   h.update(data, size);          // any number of times
//   std::string hex = h.hex();     // 64 lowercase hex digits; finishes the hash
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

namespace u3d {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  // Finishes and returns the 32-byte digest; later calls return the same digest.
  std::array<uint8_t, 32> digest();
  std::string hex();  // digest() as 64 lowercase hex digits

 private:
  struct Context;  // libcrypto's EVP_MD_CTX
  std::unique_ptr<Context> ctx_;
  bool finished_ = false;
  std::array<uint8_t, 32> digest_{};
};

// SHA-256 of a whole string / file (IoError naming the path when it cannot be read).
std::string sha256_hex(std::string_view data);
std::string sha256_file(const std::filesystem::path& path);

}  // namespace u3d
