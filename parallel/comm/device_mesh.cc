#include "parallel/comm/device_mesh.h"

#include "tensor/error.h"

namespace loom::parallel {

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, std::vector<std::pair<std::string, int>> dims)
    : world_(std::move(world)), dims_(std::move(dims)) {
  LOOM_CHECK(world_ && !dims_.empty(), "DeviceMesh: needs a group and at least one dimension");
  int64_t product = 1;
  std::string shape;
  for (const auto& [name, n] : dims_) {
    LOOM_CHECK(n >= 1, "DeviceMesh: dimension '", name, "' has size ", n);
    product *= n;
    shape += (shape.empty() ? "" : " x ") + name + " " + std::to_string(n);
  }
  LOOM_CHECK(product == world_->size(), "DeviceMesh: ", shape, " makes ", product, " ranks, but the group has ",
             world_->size());
  // Row-major: the last dimension varies fastest.
  int rest = world_->rank();
  coordinates_.resize(dims_.size());
  for (size_t d = dims_.size(); d-- > 0;) {
    coordinates_[d] = rest % dims_[d].second;
    rest /= dims_[d].second;
  }
  for (size_t d = 0; d < dims_.size(); ++d) {
    std::vector<bool> in(dims_.size(), false);
    in[d] = true;
    groups_.push_back(split_along(in));
  }
}

std::shared_ptr<ProcessGroup> DeviceMesh::split_along(const std::vector<bool>& in) const {
  // color: the coordinates outside `in` as one number; key: those inside, row-major.
  int color = 0, key = 0;
  for (size_t d = 0; d < dims_.size(); ++d) {
    int& number = in[d] ? key : color;
    number = number * dims_[d].second + coordinates_[d];
  }
  return world_->split(color, key);
}

const std::shared_ptr<ProcessGroup>& DeviceMesh::group(std::initializer_list<std::string> dims) {
  return group(std::vector<std::string>(dims));
}

const std::shared_ptr<ProcessGroup>& DeviceMesh::group(const std::vector<std::string>& dims) {
  LOOM_CHECK(!dims.empty(), "DeviceMesh::group: no dimensions given");
  std::vector<bool> in(dims_.size(), false);
  for (const std::string& dim : dims) {
    const size_t d = index(dim);
    LOOM_CHECK(!in[d], "DeviceMesh::group: dimension '", dim, "' is named twice");
    in[d] = true;
  }
  if (dims.size() == 1) return groups_[index(dims[0])];
  auto it = joint_groups_.find(in);
  if (it == joint_groups_.end()) it = joint_groups_.emplace(in, split_along(in)).first;
  return it->second;
}

size_t DeviceMesh::index(const std::string& dim) const {
  for (size_t d = 0; d < dims_.size(); ++d)
    if (dims_[d].first == dim) return d;
  LOOM_FAIL("DeviceMesh: no dimension '", dim, "'");
}

}  // namespace loom::parallel
