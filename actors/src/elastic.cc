#include "yard/actors/elastic.h"

#include <algorithm>
#include <stdexcept>

namespace yard::actors {

ElasticPlan plan_elastic(const std::vector<ElasticSlot>& slots, int min, int max) {
  if (min < 1 || max < min)
    throw std::invalid_argument("elastic group: MIN:MAX must have 1 <= MIN <= MAX (got " + std::to_string(min) + ":" +
                                std::to_string(max) + ")");
  using S = ElasticSlot::State;
  ElasticPlan p;
  std::vector<size_t> survivors, ready;
  int lost = 0, leaving = 0, in_play = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const auto& s = slots[i];
    if (s.state == S::kLost) {
      lost += s.rank >= 0;
      continue;
    }
    if (s.draining) {
      p.release.push_back(i);
      leaving += s.state == S::kMember;
      continue;
    }
    ++in_play;
    if (s.state == S::kMember) survivors.push_back(i);
    if (s.state == S::kReady) ready.push_back(i);
  }
  std::stable_sort(survivors.begin(), survivors.end(), [&](size_t a, size_t b) { return slots[a].rank < slots[b].rank; });
  p.submit = std::max(0, max - in_play);
  size_t room = static_cast<size_t>(max) > survivors.size() ? static_cast<size_t>(max) - survivors.size() : 0;
  size_t joining = std::min(room, ready.size());
  if (lost == 0 && leaving == 0 && joining == 0) return p;
  p.ranks = survivors;
  p.ranks.insert(p.ranks.end(), ready.begin(), ready.begin() + static_cast<long>(joining));
  auto part = [&p](int n, const char* what) {
    if (n > 0) p.why += (p.why.empty() ? "" : ", ") + std::to_string(n) + " " + what;
  };
  part(lost, "lost");
  part(leaving, "released from a draining node");
  part(static_cast<int>(joining), "joined");
  if (static_cast<int>(p.ranks.size()) < min) {
    p.wait = true;
    p.ranks.clear();
    return p;
  }
  p.regroup = true;
  return p;
}

}  // namespace yard::actors
