#include "node/local_resources.h"

namespace yard::sched {

LocalResources::LocalResources(ResourceLedger& ledger, std::string node, Res total, int gpus)
    : ledger_(ledger), node_(std::move(node)), total_(std::move(total)), avail_(total_), gpus_(gpus) {}

bool LocalResources::take(const Res& need) {
  if (fenced_ || !fits(need, avail_)) return false;
  if (ledger_.take(node_, need)) {
    for (auto& [k, v] : need) avail_[k] -= v;
    return true;
  }
  refresh();  // the ledger knows better: someone else took it
  return false;
}

void LocalResources::give(const Res& amount) {
  if (amount.empty()) return;
  ledger_.give(node_, amount);
  refresh();
}

void LocalResources::refresh() {
  if (auto a = ledger_.available(node_)) avail_ = std::move(*a);
}

void LocalResources::reopen() {
  ledger_.open(node_, total_);
  avail_ = total_;
  fenced_ = false;
}

}  // namespace yard::sched
