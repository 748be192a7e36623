#include "tensor/generator.h"

#include "tensor/error.h"
#include "tensor/philox.h"

namespace loom {
namespace {

// This thread's recordings and replays, innermost last.
struct DrawFrame {
  std::vector<Draw>* recording = nullptr;    // a DrawRecording's log
  const std::vector<Draw>* replay = nullptr;  // or a DrawReplay's
  size_t next = 0;                            // the replay's next draw
  DrawSink* capture = nullptr;               // or a DrawCapture's sink
};
thread_local std::vector<DrawFrame> t_draw_frames;

// This thread's own default generator, while a ThreadDefaultGenerator lives.
thread_local Generator* t_default_generator = nullptr;

}  // namespace

Draw Generator::draw() { return draw(/*on_device=*/true); }

Draw Generator::draw(bool on_device) {
  // The innermost replay or (for device draws) capture supplies the draw;
  // the recordings inside it keep it.
  std::vector<DrawFrame>& frames = t_draw_frames;
  size_t source = frames.size();
  while (source > 0 && frames[source - 1].replay == nullptr && !(on_device && frames[source - 1].capture != nullptr))
    --source;
  Draw d;
  if (source > 0 && frames[source - 1].replay != nullptr) {
    DrawFrame& f = frames[source - 1];
    LOOM_CHECK(f.next < f.replay->size(), "checkpoint: the replay of a segment draws more random numbers than its "
               "forward did (", f.replay->size(), " draws); the function must compute the same thing twice");
    d = (*f.replay)[f.next++];
  } else if (source > 0) {
    d = frames[source - 1].capture->take(*this);
  } else {
    d = {seed_, offset_.fetch_add(1)};
  }
  for (size_t i = source; i < frames.size(); ++i)
    if (frames[i].recording != nullptr) frames[i].recording->push_back(d);
  return d;
}

DrawRecording::DrawRecording(std::vector<Draw>& log) { t_draw_frames.push_back({&log, nullptr, 0, nullptr}); }
DrawRecording::~DrawRecording() { t_draw_frames.pop_back(); }
DrawReplay::DrawReplay(const std::vector<Draw>& log) { t_draw_frames.push_back({nullptr, &log, 0, nullptr}); }
DrawReplay::~DrawReplay() { t_draw_frames.pop_back(); }
DrawCapture::DrawCapture(DrawSink& sink) { t_draw_frames.push_back({nullptr, nullptr, 0, &sink}); }
DrawCapture::~DrawCapture() { t_draw_frames.pop_back(); }

uint64_t Generator::next_u64() {
  const Draw d = draw(/*on_device=*/false);
  philox::Block b = philox::random_block(d.seed, d.offset, 0);
  return (static_cast<uint64_t>(b.v[0]) << 32) | b.v[1];
}

double Generator::next_double() {
  const Draw d = draw(/*on_device=*/false);
  philox::Block b = philox::random_block(d.seed, d.offset, 0);
  return philox::uniform_double(b.v[0], b.v[1]);
}

Generator& default_generator() {
  if (t_default_generator != nullptr) return *t_default_generator;
  static Generator generator(0);
  return generator;
}

ThreadDefaultGenerator::ThreadDefaultGenerator(uint64_t seed) : generator_(seed), previous_(t_default_generator) {
  t_default_generator = &generator_;
}
ThreadDefaultGenerator::~ThreadDefaultGenerator() { t_default_generator = previous_; }

bool thread_has_own_default_generator() { return t_default_generator != nullptr; }

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

}  // namespace loom
