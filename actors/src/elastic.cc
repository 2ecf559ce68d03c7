#include "yard/actors/elastic.h"

#include <algorithm>
#include <stdexcept>

namespace yard::actors {

namespace {

// Above MAX: lets go of candidates (latest first), then of members on nodes the head named, then
// of members from the highest rank, keeping MIN members. The members let go, counted.
int release_excess(const std::vector<ElasticSlot>& slots, int min, int max, int& in_play, std::vector<size_t>& survivors,
                   std::vector<size_t>& ready, ElasticPlan& p) {
  using S = ElasticSlot::State;
  for (size_t i = slots.size(); i-- > 0 && in_play > max;) {
    const auto& s = slots[i];
    if (s.state == S::kLost || s.state == S::kMember || s.draining) continue;
    p.release.push_back(i);
    ready.erase(std::remove(ready.begin(), ready.end(), i), ready.end());
    --in_play;
  }
  std::vector<size_t> order(survivors.rbegin(), survivors.rend());  // highest rank first
  std::stable_partition(order.begin(), order.end(), [&](size_t i) { return slots[i].asked; });
  int shed = 0;
  for (size_t i : order) {
    if (in_play <= max || static_cast<int>(survivors.size()) <= min) break;
    p.release.push_back(i);
    survivors.erase(std::remove(survivors.begin(), survivors.end(), i), survivors.end());
    --in_play;
    ++shed;
  }
  return shed;
}

}  // namespace

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
  int shed = release_excess(slots, min, max, in_play, survivors, ready, p);
  p.to_queue = shed;
  leaving += shed;
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
  part(leaving - shed, "released from a draining node");
  part(shed, "released to the job queue");
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
