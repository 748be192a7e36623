#include "tensor/device_queue.h"

namespace loom {

DeviceQueue::DeviceQueue(Device device) : device_(device), queue_(backend_for(device).new_queue(device.index())) {}

DeviceQueue::Scope::Scope(const DeviceQueue& queue) {
  if (queue.queue_) guard_ = backend_for(queue.device_).enter_queue(*queue.queue_);
}

DeviceMark DeviceMark::here(Device device) {
  DeviceMark m;
  m.device_ = device;
  m.mark_ = backend_for(device).mark_queue(device.index());
  return m;
}

DeviceMark DeviceMark::timed(Device device) {
  DeviceMark m;
  m.device_ = device;
  m.mark_ = backend_for(device).mark_queue(device.index(), /*timed=*/true);
  return m;
}

double DeviceMark::seconds_until(const DeviceMark& later) const {
  if (!mark_ || !later.mark_) return 0;
  return backend_for(device_).seconds_between(*mark_, *later.mark_);
}

void DeviceMark::wait_here() const {
  if (mark_) backend_for(device_).wait_for_mark(*mark_, device_.index());
}

void used_here(const Tensor& t) {
  if (t.defined() && !t.device().is_cpu()) backend_for(t.device()).used_on_current_queue(t);
}

}  // namespace loom
