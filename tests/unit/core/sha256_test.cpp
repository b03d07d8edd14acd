// SHA-256 (libcrypto) against the FIPS 180-4 / NIST test vectors, for every way of splitting the
// input.
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/core/sha256.h"

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
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrst"
       "u",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
      {std::string(1000000, 'a'), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
      // 55, 56 and 64 bytes: the padding boundaries.
      {std::string(55, 'x'), ""},
      {std::string(56, 'x'), ""},
      {std::string(64, 'x'), ""},
  };
}

TEST(Sha256, MatchesTheFipsVectorsInEveryWayOfSplittingTheInput) {
  for (const auto& v : vectors()) {
    Sha256 h;
    h.update(v.input);
    const std::string one_shot = h.hex();
    if (!v.digest.empty()) EXPECT_EQ(one_shot, v.digest) << "len " << v.input.size();
    EXPECT_EQ(h.hex(), one_shot) << "a second hex() returns the same digest";
    // Byte by byte and in odd-sized pieces give the same digest.
    Sha256 bytes;
    for (char c : v.input.substr(0, 5000)) bytes.update(&c, 1);
    if (v.input.size() <= 5000) EXPECT_EQ(bytes.hex(), one_shot);
    Sha256 pieces;
    for (size_t pos = 0; pos < v.input.size(); pos += 77) pieces.update(v.input.substr(pos, 77));
    EXPECT_EQ(pieces.hex(), one_shot);
  }
}

TEST(Sha256, UpdateAfterTheDigestIsRefused) {
  Sha256 h;
  h.update("abc");
  (void)h.hex();
  EXPECT_THROW(h.update("d"), Error);
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
