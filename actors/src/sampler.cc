#include "yard/actors/sampler.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <stdexcept>

#include "yard/actors/shares.h"

namespace yard::actors {

namespace {
// splitmix64: a portable, seedable generator (the same stream on every machine and build).
struct Mix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint64_t below(uint64_t n) { return n ? next() % n : 0; }
};
}  // namespace

DistributedSampler::DistributedSampler(uint64_t dataset_size, int world_size, int rank, uint64_t seed, bool shuffle)
    : n_(dataset_size), world_(world_size), rank_(rank), seed_(seed), shuffle_(shuffle) {
  if (world_size < 1 || rank < 0 || rank >= world_size)
    throw std::invalid_argument("sampler: rank " + std::to_string(rank) + " outside world size " + std::to_string(world_size));
}

void DistributedSampler::set_class_balanced(std::vector<int> labels, double power) {
  if (labels.size() != n_) throw std::invalid_argument("sampler: one label per sample is needed");
  if (!(power > 0 && power <= 1)) throw std::invalid_argument("sampler: balance power must be in (0, 1]");
  labels_ = std::move(labels);
  power_ = power;
}

uint64_t DistributedSampler::class_draws(uint64_t n, uint64_t most) const {
  if (power_ >= 1) return most;
  double k = double(most) * std::pow(double(n) / double(most), 1 - power_);
  return std::max<uint64_t>(n, static_cast<uint64_t>(std::llround(k)));
}

uint64_t DistributedSampler::epoch_size() const {
  if (labels_.empty()) return n_;
  std::map<int, uint64_t> counts;
  for (int l : labels_) ++counts[l];
  uint64_t most = 0, total = 0;
  for (auto& [c, k] : counts) most = std::max(most, k);
  for (auto& [c, k] : counts) total += class_draws(k, most);
  return total;
}

std::vector<uint64_t> DistributedSampler::epoch_order(uint64_t epoch) const {
  Mix rng{seed_ * 0x100000001b3ull ^ (epoch + 1) * 0x9e3779b97f4a7c15ull};
  std::vector<uint64_t> order;
  if (labels_.empty()) {
    order.resize(n_);
    for (uint64_t i = 0; i < n_; ++i) order[i] = i;
  } else {
    std::map<int, std::vector<uint64_t>> by_class;
    for (uint64_t i = 0; i < n_; ++i) by_class[labels_[i]].push_back(i);
    uint64_t most = 0;
    for (auto& [c, v] : by_class) most = std::max<uint64_t>(most, v.size());
    for (auto& [c, v] : by_class) {
      // Every member once, then random repeats up to the class's share.
      order.insert(order.end(), v.begin(), v.end());
      for (uint64_t k = v.size(), want = class_draws(v.size(), most); k < want; ++k) order.push_back(v[rng.below(v.size())]);
    }
  }
  if (shuffle_)
    for (uint64_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng.below(i)]);  // Fisher-Yates
  return order;
}

std::vector<uint64_t> DistributedSampler::indices(uint64_t epoch) const {
  auto order = epoch_order(epoch);
  std::vector<uint64_t> mine;
  for (uint64_t i = static_cast<uint64_t>(rank_); i < order.size(); i += static_cast<uint64_t>(world_)) mine.push_back(order[i]);
  return mine;
}

uint64_t DistributedSampler::steps_per_epoch(uint64_t batch_size) const {
  if (batch_size == 0) throw std::invalid_argument("sampler: batch size 0");
  uint64_t per_rank_max = (epoch_size() + world_ - 1) / world_;
  return (per_rank_max + batch_size - 1) / batch_size;
}

std::vector<uint64_t> DistributedSampler::batch(uint64_t epoch, uint64_t step, uint64_t batch_size) const {
  if (cached_epoch_ != epoch || cached_whole_) {
    cached_ = indices(epoch);
    cached_epoch_ = epoch;
    cached_whole_ = false;
  }
  const auto& mine = cached_;
  uint64_t lo = std::min<uint64_t>(mine.size(), step * batch_size);
  uint64_t hi = std::min<uint64_t>(mine.size(), lo + batch_size);
  return std::vector<uint64_t>(mine.begin() + static_cast<long>(lo), mine.begin() + static_cast<long>(hi));
}

std::vector<uint64_t> DistributedSampler::elastic_batch(uint64_t epoch, uint64_t offset, int world, int rank,
                                                       uint64_t batch_size) const {
  if (world < 1 || rank < 0 || rank >= world) throw std::invalid_argument("sampler: rank outside the world");
  whole_epoch(epoch);
  std::vector<uint64_t> out;
  auto w = static_cast<uint64_t>(world);
  for (uint64_t j = 0, p = offset + static_cast<uint64_t>(rank); j < batch_size && p < cached_.size(); ++j, p += w)
    out.push_back(cached_[p]);
  return out;
}

const std::vector<uint64_t>& DistributedSampler::whole_epoch(uint64_t epoch) const {
  if (cached_epoch_ != epoch || !cached_whole_) {
    cached_ = epoch_order(epoch);
    cached_epoch_ = epoch;
    cached_whole_ = true;
  }
  return cached_;
}

std::vector<uint64_t> DistributedSampler::shared_batch(uint64_t epoch, uint64_t offset, const std::vector<uint64_t>& shares,
                                                      int rank) const {
  if (rank < 0 || static_cast<size_t>(rank) >= shares.size()) throw std::invalid_argument("sampler: rank outside the shares");
  auto world = static_cast<int>(shares.size());
  if (std::adjacent_find(shares.begin(), shares.end(), std::not_equal_to<>()) == shares.end())
    return elastic_batch(epoch, offset, world, rank, shares[0]);
  const auto& order = whole_epoch(epoch);
  uint64_t step = std::accumulate(shares.begin(), shares.end(), uint64_t{0});
  uint64_t left = order.size() > offset ? order.size() - offset : 0;
  std::vector<uint64_t> take = shares;
  if (left < step) {
    std::vector<double> w(shares.begin(), shares.end());
    take = split_by_weight(left, w, 0);
  }
  uint64_t first = offset + std::accumulate(take.begin(), take.begin() + rank, uint64_t{0});
  uint64_t end = std::min<uint64_t>(order.size(), first + take[static_cast<size_t>(rank)]);
  if (first >= end) return {};
  return std::vector<uint64_t>(order.begin() + static_cast<long>(first), order.begin() + static_cast<long>(end));
}

std::string ElasticPosition::text() const { return std::to_string(epoch) + " " + std::to_string(offset); }

ElasticPosition ElasticPosition::parse(const std::string& text) {
  ElasticPosition p;
  size_t at = 0;
  try {
    p.epoch = std::stoull(text, &at);
    p.offset = std::stoull(text.substr(at));
  } catch (const std::exception&) {
    throw std::invalid_argument("data position '" + text + "' is not \"epoch offset\"");
  }
  return p;
}

void ElasticPosition::advance(int world, uint64_t batch_size, uint64_t epoch_size) {
  offset += batch_size * static_cast<uint64_t>(world);
  if (offset >= epoch_size) {
    ++epoch;
    offset = 0;
  }
}

}  // namespace yard::actors
