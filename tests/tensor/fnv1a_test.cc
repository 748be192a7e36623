// FNV-1a against the published 64-bit test vectors (the FNV authors' test
// suite): a hash that ranks and runs compare must be the standard one.
#include "tensor/fnv1a.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace loom {
namespace {

uint64_t hash_of(const std::string& text) { return fnv1a(text.data(), text.size()); }

TEST(Fnv1a, MatchesThePublishedVectors) {
  EXPECT_EQ(hash_of(""), 0xcbf29ce484222325ull);  // the offset basis itself
  EXPECT_EQ(hash_of("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(hash_of("foobar"), 0x85944171f73967e8ull);
}

TEST(Fnv1a, ContinuesAcrossPieces) {
  EXPECT_EQ(fnv1a("bar", 3, hash_of("foo")), hash_of("foobar"));
  EXPECT_NE(hash_of("foobar"), hash_of("foobaz"));
}

}  // namespace
}  // namespace loom
