// TensorBoard's event-file format, written by hand: the few protobuf
// messages a SummaryWriter needs, and the record that frames each one.
//
//   std::string file = record(file_version_event(now));      // the first record of every file
//   file += record(scalar_event(now, /*step=*/10, "lr", 1e-3f));
//
// The messages, from TensorFlow's tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto (only the fields used here):
//
//   message Event   { double wall_time = 1; int64 step = 2;
//                     oneof what { string file_version = 3; Summary summary = 5; } }
//   message Summary { repeated Value value = 1; }
//   message Value   { string tag = 1; oneof value { float simple_value = 2; HistogramProto histo = 5; } }
//   message HistogramProto { double min = 1; double max = 2; double num = 3; double sum = 4;
//                            double sum_squares = 5;
//                            repeated double bucket_limit = 6 [packed = true];
//                            repeated double bucket = 7 [packed = true]; }
//
// A record is the TFRecord framing: the data's length as a little-endian
// uint64, the masked CRC-32C of those 8 bytes, the data, and the masked
// CRC-32C of the data (tensorflow/core/lib/io/record_writer.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::tensorboard {

// What TensorBoard's reader expects in the first event of a file.
inline constexpr const char* kFileVersion = "brain.Event:2";

// A histogram as TensorBoard draws it: bucket i counts the values from
// bucket_limit[i-1] (the first from -infinity) up to bucket_limit[i].
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

// `buckets` equal buckets from the least to the greatest of `values`, each
// holding its left edge and the last its right too (numpy.histogram's rule);
// the limits are their right edges, as PyTorch's add_histogram(bins=N) makes them.
Histogram make_histogram(const std::vector<double>& values, int buckets);

// Encoded Event messages: `wall_time` in seconds since the Unix epoch.
std::string file_version_event(double wall_time);
std::string scalar_event(double wall_time, int64_t step, const std::string& tag, float value);
std::string histogram_event(double wall_time, int64_t step, const std::string& tag, const Histogram& histogram);

// `data` framed as one record: 8 + 4 + data.size() + 4 bytes.
std::string record(const std::string& data);

}  // namespace loom::tensorboard
