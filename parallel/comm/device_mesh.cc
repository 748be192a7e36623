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
    // The ranks that share every other coordinate: color = those coordinates as one number.
    int color = 0;
    for (size_t e = 0; e < dims_.size(); ++e)
      if (e != d) color = color * dims_[e].second + coordinates_[e];
    groups_.push_back(world_->split(color, coordinates_[d]));
  }
}

size_t DeviceMesh::index(const std::string& dim) const {
  for (size_t d = 0; d < dims_.size(); ++d)
    if (dims_[d].first == dim) return d;
  LOOM_FAIL("DeviceMesh: no dimension '", dim, "'");
}

}  // namespace loom::parallel
