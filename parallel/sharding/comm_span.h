// A finished collective of the sharded strategies as a span on the rank's
// communication lane ("rank<r>/comm", DDP's too), from when it was issued to
// when it completed, so that a trace shows each gather and reduction beside
// the compute it overlaps.
//
//   const int64_t issued = trace::now_us();
//   WorkPtr w = group.all_gather(out, in);
//   ...
//   w->wait();
//   trace_collective("all_gather unit 3", group, issued, *w);
#pragma once

#include <string>

#include "parallel/comm/process_group.h"
#include "parallel/trace.h"

namespace loom::parallel {

inline void trace_collective(const std::string& name, const ProcessGroup& group, int64_t issued_us,
                             const Work& work) {
  if (!trace::enabled()) return;
  trace::record(name, "communication", trace::lane("rank" + std::to_string(group.rank()) + "/comm"), issued_us,
                trace::to_us(work.completed_at()));
}

}  // namespace loom::parallel
