#include "yard/actors/batch_queue.h"

#include <algorithm>
#include <stdexcept>

namespace yard::actors {

BatchCursor::BatchCursor(uint64_t epoch_size, uint64_t batch) : epoch_size_(epoch_size), batch_(batch) {
  if (epoch_size == 0 || batch == 0) throw std::invalid_argument("batch queue: an epoch of 0 samples or a batch of 0");
}

void BatchCursor::open(uint64_t batches) { budget_ = batches; }

int64_t BatchCursor::seq() const {
  return static_cast<int64_t>(pos_.epoch * batches_per_epoch() + (pos_.offset + batch_ - 1) / batch_);
}

BatchClaim BatchCursor::claim(int worker) {
  complete(worker);
  BatchClaim c;
  if (!returned_.empty()) {
    c = returned_.back();
    returned_.pop_back();
    c.again = true;
    held_[worker] = c;
  } else if (budget_ > 0) {
    c.granted = true;
    c.epoch = pos_.epoch;
    c.offset = pos_.offset;
    c.size = std::min(batch_, epoch_size_ - pos_.offset);
    c.seq = seq();
    --budget_;
    pos_.offset += c.size;
    if (pos_.offset >= epoch_size_) {  // the epoch's last batch: the chunk ends with it
      ++pos_.epoch;
      pos_.offset = 0;
      budget_ = 0;
    }
    held_[worker] = c;
  }
  c.next_epoch = pos_.epoch;
  c.next_offset = pos_.offset;
  return c;
}

void BatchCursor::complete(int worker) { held_.erase(worker); }

void BatchCursor::release(int worker) {
  auto it = held_.find(worker);
  if (it == held_.end()) return;
  returned_.push_back(it->second);
  held_.erase(it);
}

std::vector<int> BatchCursor::holders() const {
  std::vector<int> out;
  for (auto& [w, claim] : held_) out.push_back(w);
  return out;
}

std::string BatchCursor::state() const { return pos_.text(); }

void BatchCursor::seek(const std::string& state) {
  auto p = ElasticPosition::parse(state);
  if (p.offset >= epoch_size_)
    throw std::invalid_argument("batch queue: position '" + state + "' is past an epoch of " + std::to_string(epoch_size_) +
                                " samples");
  pos_ = p;
  budget_ = 0;
  held_.clear();
  returned_.clear();
}

BatchQueue::BatchQueue(uint64_t batch) : batch_(batch) {
  if (batch == 0) throw std::invalid_argument("batch queue: a batch of 0");
}

BatchCursor& BatchQueue::cursor() {
  if (!cursor_) throw std::logic_error("batch queue: used before define() gave it the epoch's size");
  return *cursor_;
}

void BatchQueue::define(uint64_t epoch_size) {
  cond_.update([&] {
    if (!cursor_) {
      cursor_.emplace(epoch_size, batch_);
    } else if (cursor_->epoch_size() != epoch_size) {
      throw std::invalid_argument("batch queue: a worker's epoch has " + std::to_string(epoch_size) +
                                  " samples, another's " + std::to_string(cursor_->epoch_size()) +
                                  ": the workers do not have the same data");
    }
  });
}

void BatchQueue::open(uint64_t batches) {
  cond_.update([&] { cursor().open(batches); });
}

BatchClaim BatchQueue::claim(int worker) {
  BatchClaim c;
  cond_.update([&] {
    c = cursor().claim(worker);
    if (c.granted) ++taken_[worker];
  });
  return c;
}

void BatchQueue::complete(int worker) {
  cond_.update([&] { cursor().complete(worker); });
}

void BatchQueue::release(int worker) {
  cond_.update([&] { cursor().release(worker); });
}

std::vector<int> BatchQueue::drained(int64_t timeout_ms) {
  std::vector<int> left;
  if (!cond_.wait_for([&] { return cursor().outstanding() == 0; }, std::chrono::milliseconds(timeout_ms)))
    cond_.read([&] { left = cursor().holders(); });
  return left;
}

std::string BatchQueue::position() {
  std::string s;
  cond_.read([&] { s = cursor().state(); });
  return s;
}

void BatchQueue::seek(std::string state) {
  cond_.update([&] { cursor().seek(state); });
}

std::map<int, int64_t> BatchQueue::taken() {
  std::map<int, int64_t> t;
  cond_.read([&] { t = taken_; });
  return t;
}

}  // namespace yard::actors

YARD_ACTOR(yard::actors::BatchQueue, yard::ctor<uint64_t>, &yard::actors::BatchQueue::define, &yard::actors::BatchQueue::open,
           &yard::actors::BatchQueue::claim, &yard::actors::BatchQueue::complete, &yard::actors::BatchQueue::release, &yard::actors::BatchQueue::drained,
           &yard::actors::BatchQueue::position, &yard::actors::BatchQueue::seek, &yard::actors::BatchQueue::taken);
