// Stands in for a CUDA test in builds without the CUDA backend (no toolkit,
// or --//:cuda=false), so that the target still builds and reports a skip.
#include <gtest/gtest.h>

TEST(Cuda, NotBuilt) {
  GTEST_SKIP() << "loom was built without the CUDA backend (no CUDA toolkit, or --//:cuda=false): "
                  "CUDA test skipped";
}
