// Writes the event file event_file_python_test.sh reads back: into the
// folder given, scalars 0.5 * step at steps 1..5 under "loss", 1e-3 under
// "lr" at step 5, and a histogram of 1, 2, 2, 3 in 3 bins under "w" at
// step 7. Prints the file's path.
#include <cstdio>

#include "tensorboard/summary_writer.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: write_events DIR\n");
    return 2;
  }
  loom::tensorboard::SummaryWriter writer(argv[1], {.max_queue = 2});
  for (int step = 1; step <= 5; ++step) writer.add_scalar("loss", 0.5 * step, step);
  writer.add_scalar("lr", 1e-3, 5);
  writer.add_histogram("w", std::vector<double>{1, 2, 2, 3}, 7, 3);
  writer.close();
  std::printf("%s\n", writer.file().c_str());
  return 0;
}
