// The whole module through its umbrella header, used as data/data.h's example
// shows: Fashion-MNIST's test set through a shuffling DataLoader with workers.
#include "data/data.h"

#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace loom::data {
namespace {

TEST(Data, FashionMnistThroughADataLoader) {
  DataLoader loader(FashionMnist::test(),
                    {.batch_size = 256, .shuffle = true, .seed = 1, .num_workers = 2});
  EXPECT_EQ(loader.num_batches(), 40);  // 39 full batches and one of 16
  std::vector<int64_t> per_class(10);
  int64_t examples = 0;
  double pixel_sum = 0;
  for (auto& [x, y] : loader.epoch(0)) {
    ASSERT_EQ(x.dim(), 4);
    EXPECT_EQ(x.shape(), (Shape{y.size(0), 1, 28, 28}));
    examples += y.size(0);
    pixel_sum += sum(x.to(kFloat64)).item();
    for (int64_t label : y.to_vector<int64_t>()) per_class.at(static_cast<size_t>(label))++;
  }
  EXPECT_EQ(examples, 10000);
  EXPECT_EQ(per_class, std::vector<int64_t>(10, 1000));
  // Python: the test set's pixels sum to 573469082 (before / 255). Each
  // float32 k / 255 is off by up to 3e-8 relative, so the sum by up to ~17;
  // one image missing or repeated would move it by thousands.
  EXPECT_NEAR(pixel_sum * 255, 573469082, 60);
}

}  // namespace
}  // namespace loom::data
