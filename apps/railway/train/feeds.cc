#include "feeds.h"

#include <stdexcept>

#include "yard/actors/data_loader.h"

namespace railway_train {

namespace {

class FixedFeed final : public Feed {
 public:
  FixedFeed(yard::actors::DistributedSampler sampler, uint64_t batch, Fetch fetch, size_t prefetch)
      : loader_(std::move(sampler), batch, std::move(fetch), prefetch) {}
  FeedItem next() override {
    auto it = loader_.next();
    return {std::move(it.indices), std::move(it.batch)};
  }
  uint64_t epoch() const override { return loader_.position().epoch; }
  uint64_t step() const override { return loader_.position().step; }
  uint64_t steps_per_epoch() const override { return loader_.steps_per_epoch(); }
  uint64_t steps_left() const override { return loader_.steps_per_epoch() - loader_.position().step; }
  std::string state() const override { return Loader::encode(loader_.position()); }
  void restore(const std::string& state) override { loader_.seek(Loader::decode(state)); }
  const char* checkpoint_key() const override { return "loader"; }

 private:
  using Loader = yard::actors::DataLoader<Batch>;
  Loader loader_;
};

yard::actors::ElasticPosition parse_position(const std::string& s) {
  yard::actors::ElasticPosition p;
  size_t at = 0;
  try {
    p.epoch = std::stoull(s, &at);
    p.offset = std::stoull(s.substr(at));
  } catch (const std::exception&) {
    throw std::invalid_argument("elastic data position '" + s + "' is not \"epoch offset\"");
  }
  return p;
}

}  // namespace

std::unique_ptr<Feed> fixed_feed(yard::actors::DistributedSampler sampler, uint64_t batch, Fetch fetch, size_t prefetch) {
  return std::make_unique<FixedFeed>(std::move(sampler), batch, std::move(fetch), prefetch);
}

ElasticFeed::ElasticFeed(yard::actors::DistributedSampler sampler, uint64_t batch, Fetch fetch)
    : sampler_(std::move(sampler)), batch_(batch), fetch_(std::move(fetch)) {
  if (batch_ == 0) throw std::invalid_argument("elastic feed: batch size 0");
}

void ElasticFeed::set_world(int world, int rank) {
  if (world < 1 || rank < 0 || rank >= world) throw std::invalid_argument("elastic feed: rank outside the world");
  world_ = world;
  rank_ = rank;
}

FeedItem ElasticFeed::next() {
  FeedItem it;
  it.indices = sampler_.elastic_batch(pos_.epoch, pos_.offset, world_, rank_, batch_);
  it.batch = fetch_(it.indices);
  pos_.advance(world_, batch_, sampler_.epoch_size());
  return it;
}

std::vector<uint64_t> ElasticFeed::warm_up_indices() const { return sampler_.elastic_batch(0, 0, 1, 0, batch_); }

uint64_t ElasticFeed::step() const { return pos_.offset / (batch_ * static_cast<uint64_t>(world_)); }

uint64_t ElasticFeed::steps_per_epoch() const {
  uint64_t per_step = batch_ * static_cast<uint64_t>(world_);
  return (sampler_.epoch_size() + per_step - 1) / per_step;
}

uint64_t ElasticFeed::steps_left() const {
  uint64_t per_step = batch_ * static_cast<uint64_t>(world_), left = sampler_.epoch_size() - pos_.offset;
  return (left + per_step - 1) / per_step;
}

std::string ElasticFeed::state() const { return std::to_string(pos_.epoch) + " " + std::to_string(pos_.offset); }

void ElasticFeed::restore(const std::string& state) { pos_ = parse_position(state); }

uint64_t ElasticFeed::samples_left(const std::string& state, uint64_t epochs) const {
  auto p = parse_position(state);
  if (p.epoch >= epochs) return 0;
  return (epochs - p.epoch) * sampler_.epoch_size() - p.offset;
}

}  // namespace railway_train
