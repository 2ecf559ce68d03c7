#include "daemon.h"

#include "common/service.h"
#include "head/head_service.h"
#include "node/node_manager.h"
#include "sim/simulated_nodes.h"

namespace yard::sched {

int run_daemon(const DaemonOptions& opts) {
  take_stop_signals();
  if (opts.join_address.empty()) return HeadService(opts).run();
  if (opts.simulate > 0) return sim::SimulatedNodes(opts).run();
  return NodeManager(opts).run();
}

}  // namespace yard::sched
