#include "examples/common/run_record.h"

#include "tensor/file_io.h"

namespace loom::examples {
namespace {

const std::string kMetricsKey = "metrics_csv";
const std::string kSettingPrefix = "setting:";

}  // namespace

RunRecord::RunRecord(Options options) : options_(std::move(options)), csv_(options_.metrics, options_.columns) {}

void RunRecord::check_writable() const {
  AtomicFile::check_writable(options_.checkpoint, "--checkpoint");
  if (!options_.metrics.empty()) AtomicFile::check_writable(options_.metrics, "--metrics");
}

optim::TrainingProgress RunRecord::resume(nn::Module& model, optim::Optimizer& optimizer) {
  const std::string& path = options_.checkpoint;
  const optim::TrainingCheckpoint checkpoint = optim::read_training_checkpoint(path, options_.writer);
  const optim::TrainingProgress& progress = checkpoint.progress;
  for (const auto& [flag, value] : options_.settings) {
    auto saved = progress.extra.find(kSettingPrefix + flag);
    LOOM_CHECK(saved != progress.extra.end(), "checkpoint ", path, " does not record ", flag,
               "; it is not from this program (start afresh without --resume)");
    LOOM_CHECK(saved->second == value, "checkpoint ", path, " was written with ", flag, " ", saved->second,
               "; this run has ", flag, " ", value,
               ": resume with the settings of the run it continues (or start afresh without --resume)");
  }
  auto metrics = progress.extra.find(kMetricsKey);
  LOOM_CHECK(metrics != progress.extra.end(), "checkpoint ", path, " has no metrics rows");
  csv_.restore(metrics->second, "checkpoint " + path);
  LOOM_CHECK(static_cast<int64_t>(csv_.rows()) == progress.epoch, "checkpoint ", path, " has ", csv_.rows(),
             " metrics rows for ", progress.epoch, " finished epochs");
  optim::restore_training_checkpoint(checkpoint, model, optimizer);  // everything above checked first
  csv_.write();  // puts back a row that a kill after the last commit kept out of the CSV
  return progress;
}

void RunRecord::commit_epoch(const nn::Module& model, const optim::Optimizer& optimizer,
                             optim::TrainingProgress progress, const std::vector<double>& row) {
  csv_.add(row);
  commit(model, optimizer, std::move(progress), /*write_csv=*/true);
}

void RunRecord::commit_step(const nn::Module& model, const optim::Optimizer& optimizer,
                            optim::TrainingProgress progress) {
  commit(model, optimizer, std::move(progress), /*write_csv=*/false);
}

void RunRecord::commit(const nn::Module& model, const optim::Optimizer& optimizer, optim::TrainingProgress progress,
                       bool write_csv) {
  for (const auto& [flag, value] : options_.settings) progress.extra[kSettingPrefix + flag] = value;
  progress.extra[kMetricsKey] = csv_.text();
  if (!options_.async) {
    optim::save_training_checkpoint(options_.checkpoint, model, optimizer, progress, options_.writer);
    if (write_csv) csv_.write();
    return;
  }
  std::function<void()> then;
  if (write_csv) then = [csv = csv_] { csv.write(); };  // the rows as committed; after the checkpoint's rename
  async_.save(options_.checkpoint, model, optimizer, progress, options_.writer, std::move(then));
}

}  // namespace loom::examples
