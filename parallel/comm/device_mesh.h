// DeviceMesh: the ranks of a job laid out on a grid with named dimensions,
// and for each dimension the group of the ranks that differ only along it —
// how hybrid strategies get their groups (PyTorch's init_device_mesh).
//
//   DeviceMesh mesh(world, {{"data", 2}, {"pipeline", 2}});   // 4 ranks: rank = data * 2 + pipeline
//   mesh.coordinate("pipeline");   // this rank's stage
//   mesh.group("pipeline");        // its pipeline: the ranks with its data coordinate
//   mesh.group("data");            // the ranks that hold the same stage, to average its gradients
//
//   DeviceMesh cube(world, {{"data", 2}, {"context", 2}, {"tensor", 2}});   // 8 ranks
//   cube.group({"data", "context"});   // the 4 ranks with this rank's tensor coordinate: the
//                                      // ones that hold the same slices, for DDP or FSDP
//
// Every rank of `world` builds the mesh (each dimension is a split of world).
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "parallel/comm/process_group.h"

namespace loom::parallel {

class DeviceMesh {
 public:
  // `dims`: names and sizes, outermost first; their product is world's size.
  DeviceMesh(std::shared_ptr<ProcessGroup> world, std::vector<std::pair<std::string, int>> dims);

  int size(const std::string& dim) const { return dims_[index(dim)].second; }
  int coordinate(const std::string& dim) const { return coordinates_[index(dim)]; }
  const std::shared_ptr<ProcessGroup>& group(const std::string& dim) const { return groups_[index(dim)]; }
  const std::shared_ptr<ProcessGroup>& world() const { return world_; }

  // The ranks that differ from this one along `dims` only (several of the
  // mesh's dimensions, in any order; ranked in the mesh's order, the last
  // varying fastest). Made on first use and kept: the first call for a set
  // of dimensions is collective, so every rank makes it, in the same order.
  const std::shared_ptr<ProcessGroup>& group(std::initializer_list<std::string> dims);
  const std::shared_ptr<ProcessGroup>& group(const std::vector<std::string>& dims);

 private:
  size_t index(const std::string& dim) const;
  // The group of the ranks that share every coordinate outside `in` (a mask over dims_).
  std::shared_ptr<ProcessGroup> split_along(const std::vector<bool>& in) const;

  std::shared_ptr<ProcessGroup> world_;
  std::vector<std::pair<std::string, int>> dims_;
  std::vector<int> coordinates_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
  std::map<std::vector<bool>, std::shared_ptr<ProcessGroup>> joint_groups_;
};

}  // namespace loom::parallel
