// SHA-256 against the FIPS 180-4 / NIST test vectors, on the portable path and (where the CPU has
// the SHA extensions) the hardware path, for every way of splitting the input.
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/errors.h"
#include "u3d/sha256.h"

namespace u3d {
namespace {

struct Vector {
  std::string input;
  std::string digest;
};

std::vector<Vector> vectors() {
  return {
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
      // 55, 56 and 64 bytes: the padding boundaries.
      {std::string(55, 'x'), ""},
      {std::string(56, 'x'), ""},
      {std::string(64, 'x'), ""},
  };
}

TEST(Sha256, MatchesTheFipsVectorsOnEveryPath) {
  std::vector<bool> paths = {false};
  if (Sha256::hardware_available()) paths.push_back(true);
  for (bool hardware : paths) {
    for (const auto& v : vectors()) {
      Sha256 h(hardware);
      h.update(v.input);
      const std::string one_shot = h.hex();
      if (!v.digest.empty()) EXPECT_EQ(one_shot, v.digest) << "hardware=" << hardware << " len " << v.input.size();
      // Byte by byte and in odd-sized pieces give the same digest.
      Sha256 bytes(hardware);
      for (char c : v.input.substr(0, 5000)) bytes.update(&c, 1);
      if (v.input.size() <= 5000) EXPECT_EQ(bytes.hex(), one_shot);
      Sha256 pieces(hardware);
      for (size_t pos = 0; pos < v.input.size(); pos += 77) pieces.update(v.input.substr(pos, 77));
      EXPECT_EQ(pieces.hex(), one_shot);
    }
  }
}

TEST(Sha256, HardwareAndPortablePathsAgreeOnRandomData) {
  if (!Sha256::hardware_available()) GTEST_SKIP() << "this CPU has no SHA extensions";
  std::string data(1 << 20, '\0');
  uint64_t x = 12345;
  for (auto& c : data) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<char>(x >> 56);
  }
  for (size_t n : {size_t{0}, size_t{1}, size_t{63}, size_t{64}, size_t{65}, size_t{1000}, data.size()}) {
    Sha256 a(false), b(true);
    a.update(data.data(), n);
    b.update(data.data(), n);
    EXPECT_EQ(a.hex(), b.hex()) << n;
  }
}

TEST(Sha256, FileHashAndErrors) {
  test::TempDir dir;
  test::write_text(dir / "f.bin", "abc");
  EXPECT_EQ(sha256_file(dir / "f.bin"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abc"), sha256_file(dir / "f.bin"));
  EXPECT_THROW(sha256_file(dir / "missing.bin"), IoError);
}

}  // namespace
}  // namespace u3d
