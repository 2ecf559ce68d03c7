#include "feeds.h"

#include <algorithm>
#include <stdexcept>

#include "yard/actors/batch_queue.h"
#include "yard/actors/data_loader.h"

namespace railway_train {

using namespace std::chrono_literals;

void Feed::seek(uint64_t, uint64_t) { throw std::logic_error("only a fixed group's feed is moved to a step"); }

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
  void seek(uint64_t epoch, uint64_t batch) override { loader_.seek({epoch, batch}); }

 private:
  using Loader = yard::actors::DataLoader<Batch>;
  Loader loader_;
};


// How long a checkpoint waits for the other trainers' last batches of the chunk.
constexpr int64_t kDrainMs = 600000;

class SharedFeed final : public Feed {
 public:
  SharedFeed(yard::actors::DistributedSampler sampler, uint64_t batch, Fetch fetch, const std::string& queue, int rank,
             int world, bool join)
      : sampler_(std::move(sampler)),
        batch_(batch),
        fetch_(std::move(fetch)),
        queue_(yard::get_actor<yard::actors::BatchQueue>(queue)),
        rank_(rank),
        world_(static_cast<uint64_t>(world)) {
    queue_.call(&yard::actors::BatchQueue::define).remote(sampler_.epoch_size()).get(60s);
    if (rank_ == 0 && !join) queue_.call(&yard::actors::BatchQueue::seek).remote(std::string("0 0")).get(60s);
  }
  FeedItem next() override {
    auto c = *queue_.call(&yard::actors::BatchQueue::claim).remote(rank_).get();
    pos_.epoch = c.next_epoch, pos_.offset = c.next_offset;
    FeedItem it;
    if (!c.granted) {
      it.none = true;
      return it;
    }
    it.indices = sampler_.elastic_batch(c.epoch, c.offset, 1, 0, c.size);
    it.batch = fetch_(it.indices);
    // The round it counts in: its own, or for a batch handed out again the one in progress now.
    it.global_step = c.again ? static_cast<int64_t>(pos_.epoch * steps_per_epoch() + std::max<uint64_t>(1, step()))
                             : static_cast<int64_t>(c.epoch * steps_per_epoch() + c.offset / batch_ / world_ + 1);
    return it;
  }
  uint64_t epoch() const override { return pos_.epoch; }
  uint64_t step() const override { return (pos_.offset / batch_ + world_ - 1) / world_; }
  uint64_t steps_per_epoch() const override { return (batches_per_epoch() + world_ - 1) / world_; }
  uint64_t steps_left() const override { return steps_per_epoch() - step(); }
  int64_t global_step() const override { return static_cast<int64_t>(pos_.epoch * steps_per_epoch() + step()); }
  std::string state() const override {
    auto left = *queue_.call(&yard::actors::BatchQueue::drained).remote(int64_t{kDrainMs}).get();
    if (!left.empty()) {
      std::string who;
      for (int r : left) who += (who.empty() ? "" : ", ") + std::to_string(r);
      throw yard::TimeoutError("batches on request: the batch of trainer rank " + who + " was not complete within " +
                               std::to_string(kDrainMs / 1000) + " s");
    }
    return *queue_.call(&yard::actors::BatchQueue::position).remote().get(60s);
  }
  void restore(const std::string& state) override {
    pos_ = yard::actors::ElasticPosition::parse(state);
    if (rank_ == 0) queue_.call(&yard::actors::BatchQueue::seek).remote(state).get(60s);
  }
  const char* checkpoint_key() const override { return "shared_position"; }
  void done() override { queue_.call(&yard::actors::BatchQueue::complete).remote(rank_).get(60s); }

 private:
  uint64_t batches_per_epoch() const { return (sampler_.epoch_size() + batch_ - 1) / batch_; }

  yard::actors::DistributedSampler sampler_;
  uint64_t batch_;
  Fetch fetch_;
  yard::ActorHandle<yard::actors::BatchQueue> queue_;
  int rank_;
  uint64_t world_;
  yard::actors::ElasticPosition pos_;
};

}  // namespace

std::unique_ptr<Feed> shared_feed(yard::actors::DistributedSampler sampler, uint64_t batch, Fetch fetch,
                                  const std::string& queue, int rank, int world, bool join) {
  return std::make_unique<SharedFeed>(std::move(sampler), batch, std::move(fetch), queue, rank, world, join);
}

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
  shares_.clear();
}

void ElasticFeed::set_shares(std::vector<uint64_t> shares) {
  uint64_t sum = 0;
  for (auto n : shares) sum += n;
  if (shares.size() != static_cast<size_t>(world_) || sum != batch_ * static_cast<uint64_t>(world_))
    throw std::invalid_argument("elastic feed: " + std::to_string(shares.size()) + " shares of " + std::to_string(sum) +
                                " samples for " + std::to_string(world_) + " ranks of " + std::to_string(batch_));
  shares_ = std::move(shares);
}

FeedItem ElasticFeed::next() {
  FeedItem it;
  it.indices = shares_.empty() ? sampler_.elastic_batch(pos_.epoch, pos_.offset, world_, rank_, batch_)
                                : sampler_.shared_batch(pos_.epoch, pos_.offset, shares_, rank_);
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

std::string ElasticFeed::state() const { return pos_.text(); }

void ElasticFeed::restore(const std::string& state) { pos_ = yard::actors::ElasticPosition::parse(state); }

uint64_t ElasticFeed::samples_left(const std::string& state, uint64_t epochs) const {
  auto p = yard::actors::ElasticPosition::parse(state);
  if (p.epoch >= epochs) return 0;
  return (epochs - p.epoch) * sampler_.epoch_size() - p.offset;
}

}  // namespace railway_train
