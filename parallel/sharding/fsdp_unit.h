// One FSDP unit: a group of parameters (a GPT block's, a conv block's) that
// is sharded at rest and gathered whole only around its own forward and
// backward (fsdp.h decides when; this file is how).
//
//   unit.start_gather();                    // all_gather of every rank's piece
//   unit.wait_gathered();                   // the parameters hold their values
//   ... the unit's forward ...
//   unit.release();                         // their memory is free again
//
// The unit's parameters are views of one flat tensor, cut into one piece per
// rank (flat_params.h). At rest a rank holds only `shard`, its own piece (a
// leaf with memory of its own, which the optimizer steps), and after a
// backward that piece's mean gradient as shard.grad(): the flat tensor's
// storage is released (Storage::release), so the parameters keep their shapes
// but no memory. Gathering brings it back into the same storage, which every
// view, including the tensors autograd saved in forward, then sees. The
// gather writes through an alias of that storage, so the storage's version
// stays as it was: the values are the same ones autograd saved, and a
// version bump would make backward reject them as modified in place.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/process_group.h"
#include "parallel/sharding/flat_params.h"

namespace loom::parallel {

class FsdpUnit {
 public:
  // `params` (with their dotted names in the model) become views of the
  // unit's flat tensor; every rank takes rank 0's values. The memory stays
  // gathered until release().
  FsdpUnit(std::string name, TensorList params, std::vector<std::string> param_names,
           std::shared_ptr<ProcessGroup> group);

  const std::string& name() const { return name_; }  // "" for the root
  const TensorList& params() const { return params_; }
  const std::vector<std::string>& param_names() const { return param_names_; }
  const Tensor& flat() const { return flat_; }
  const Tensor& shard() const { return shard_; }
  const Pieces& pieces() const { return pieces_; }

  // ---- the parameters ----
  bool gathered() const { return gathered_; }
  void start_gather();            // nothing to do when gathered or gathering
  void wait_gathered();           // gathers first when no gather is in flight
  void release();                 // frees the gathered memory; the shard stays

  // ---- the gradients ----
  // Parameter i's gradient is accumulated: it moves into the unit's flat
  // gradient and is dropped. Returns true once every parameter that requires
  // a gradient has one (the unit's backward is over).
  bool take_gradient(size_t i);
  bool gradients_complete() const { return pending_ == 0; }
  bool any_gradient() const { return flat_grad_.defined(); }
  // Reduce-scatters the flat gradient (zeros for parameters that got none):
  // this rank receives the mean gradient of its piece.
  void start_reduce();
  bool reducing() const { return reduce_ != nullptr; }
  // Adds the piece's mean gradient into shard.grad() and frees the flat gradient.
  void finish_reduce();

  // ---- checkpoints: anything laid out like the parameters (their optimizer state too) ----
  // Every rank's piece gathered into one flat tensor (a collective).
  Tensor gather_pieces(const Tensor& piece) const;
  // A flat tensor cut into the parameters' shapes (views of it).
  TensorList split_flat(const Tensor& flat) const;
  // This rank's piece of full values given per parameter (in order, any device and dtype).
  Tensor piece_of(const TensorList& values) const;
  // The shard taken from full values of the parameters.
  void load_full(const TensorList& values);

 private:
  std::string name_;
  TensorList params_;
  std::vector<std::string> param_names_;
  std::shared_ptr<ProcessGroup> group_;
  Tensor flat_;   // the parameters are views of it; its storage is released at rest
  Pieces pieces_;
  Tensor shard_;  // this rank's piece: a leaf the optimizer steps
  std::vector<int64_t> offsets_;

  bool gathered_ = false;
  WorkPtr gathering_;

  std::vector<bool> has_grad_;  // this backward
  size_t pending_ = 0;          // parameters still waiting for their gradient
  Tensor flat_grad_;
  Tensor reduced_;  // the piece's mean gradient, while it is reduced
  WorkPtr reduce_;
  void reset_pending();
};

}  // namespace loom::parallel
