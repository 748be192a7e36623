#include "tensor/generator.h"

#include "tensor/philox.h"

namespace loom {

uint64_t Generator::next_u64() {
  philox::Block b = philox::random_block(seed_, reserve(), 0);
  return (static_cast<uint64_t>(b.v[0]) << 32) | b.v[1];
}

double Generator::next_double() {
  philox::Block b = philox::random_block(seed_, reserve(), 0);
  return philox::uniform_double(b.v[0], b.v[1]);
}

Generator& default_generator() {
  static Generator generator(0);
  return generator;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace loom
