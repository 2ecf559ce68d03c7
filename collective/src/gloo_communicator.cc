#include "gloo_communicator.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "bf16.h"
#include "yard/process.h"
#include "rendezvous_store.h"
#include "sealed_ring.h"
#include "shm_channel.h"

namespace yard::collective {

namespace {

template <class F>
void dispatch(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32: return f(float{});
    case DType::kFloat64: return f(double{});
    case DType::kInt32: return f(int32_t{});
    case DType::kInt64: return f(int64_t{});
    case DType::kUInt8: return f(uint8_t{});
    case DType::kBFloat16: return f(uint16_t{});  // moved as raw 16-bit values; reduced via float32
  }
  throw CollectiveError("unknown dtype");
}

template <class T>
gloo::AllreduceOptions::Func reducer(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg: return [](void* c, const void* a, const void* b, size_t n) { gloo::sum<T>(c, a, b, n); };
    case ReduceOp::kProduct: return [](void* c, const void* a, const void* b, size_t n) { gloo::product<T>(c, a, b, n); };
    case ReduceOp::kMin: return [](void* c, const void* a, const void* b, size_t n) { gloo::min<T>(c, a, b, n); };
    case ReduceOp::kMax: return [](void* c, const void* a, const void* b, size_t n) { gloo::max<T>(c, a, b, n); };
  }
  throw CollectiveError("unknown reduce op");
}

template <class T>
void divide(void* data, size_t count, int n) {
  T* p = static_cast<T*>(data);
  for (size_t i = 0; i < count; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(n));
}

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(const GroupSpec& spec) : spec_(spec) {
    if (spec.world_size < 1 || spec.rank < 0 || spec.rank >= spec.world_size)
      throw CollectiveError("group '" + spec.name + "': rank " + std::to_string(spec.rank) +
                            " is outside world size " + std::to_string(spec.world_size));
    store_ = std::make_unique<GroupStore>(spec.rendezvous, spec.name, spec.generation, spec.timeout);
    gloo::transport::tcp::attr attr;
    attr.hostname = spec.host;
    try {
      device_ = gloo::transport::tcp::CreateDevice(attr);
      context_ = std::make_shared<gloo::rendezvous::Context>(spec.rank, spec.world_size);
      context_->setTimeout(spec.timeout);
      // Which host each rank is on decides the same-node fast path.
      std::string me = sys::host_id();
      store_->set("host_" + std::to_string(spec.rank), std::vector<char>(me.begin(), me.end()));
      std::string pid = std::to_string(getpid());
      store_->set("pid_" + std::to_string(spec.rank), std::vector<char>(pid.begin(), pid.end()));
      context_->connectFullMesh(*store_, device_);
      bool one_host = true;
      for (int r = 0; r < spec.world_size && one_host; ++r) {
        auto v = store_->get("host_" + std::to_string(r));
        one_host = std::string(v.begin(), v.end()) == me;
      }
      if (one_host) {
        for (int r = 0; r < spec.world_size; ++r) {
          auto v = store_->get("pid_" + std::to_string(r));
          peer_pids_.push_back(std::stoi(std::string(v.begin(), v.end())));
        }
      }
      if (one_host && spec.shared_memory && spec.world_size > 1)
        shm_ = std::make_unique<ShmChannel>(*store_, spec, spec.shm_chunk_bytes);
      if (!one_host && !spec.link_key.empty()) sealed_ = std::make_unique<SealedRing>(context_, *store_, spec);
    } catch (const CollectiveError&) {
      throw;
    } catch (const std::exception& e) {
      throw CollectiveError("group '" + spec.name + "': rank " + std::to_string(spec.rank) +
                            " could not connect to its peers" + dead_at_start(spec) + ": " + e.what());
    }
  }

  // " (rank(s) N died)" for peers on this host whose process is gone, from the pids they published
  // (a peer that never published one is not named); "" when none is known dead.
  std::string dead_at_start(const GroupSpec& spec) {
    std::string me = sys::host_id(), dead;
    try {
      for (int r = 0; r < spec.world_size; ++r) {
        if (r == spec.rank || store_->peek("host_" + std::to_string(r)) != me) continue;
        auto pid = store_->peek("pid_" + std::to_string(r));
        if (!pid.empty() && sys::process_dead(std::stoi(pid))) dead += (dead.empty() ? "" : ", ") + std::to_string(r);
      }
    } catch (const std::exception&) {
      return {};
    }
    return dead.empty() ? std::string() : " (rank(s) " + dead + " died)";
  }

  int rank() const override { return spec_.rank; }
  int world_size() const override { return spec_.world_size; }
  const std::string& name() const override { return spec_.name; }
  Backend backend() const override { return Backend::kGloo; }
  bool uses_shared_memory() const override { return shm_ != nullptr; }
  bool encrypts_traffic() const override { return sealed_ != nullptr; }

  void allreduce(void* data, size_t count, DType t, ReduceOp op, const Options& o) override {
    guard("allreduce", [&] {
      if (count == 0 || spec_.world_size == 1) return;
      if (shm_) return shm_->allreduce(data, count, t, op, o.timeout);
      if (t == DType::kBFloat16) return via_float32(data, count, [&](float* f) { allreduce(f, count, DType::kFloat32, op, o); });
      dispatch(t, [&](auto tag) {
        using T = decltype(tag);
        if (sealed_) return sealed_allreduce<T>(data, count, op, o);
        gloo::AllreduceOptions opts(context_);
        opts.setOutput(static_cast<T*>(data), count);
        opts.setReduceFunction(reducer<T>(op));
        opts.setTag(o.tag);
        opts.setTimeout(o.timeout);
        gloo::allreduce(opts);
        if (op == ReduceOp::kAvg) divide<T>(data, count, spec_.world_size);
      });
    });
  }

  void allreduce_coalesced(const std::vector<std::pair<void*, size_t>>& buffers, DType t, ReduceOp op,
                           const Options& o) override {
    // One staging buffer: a single operation instead of one per buffer.
    size_t total = 0;
    for (auto& b : buffers) total += b.second;
    if (total == 0) return;
    size_t es = dtype_size(t);
    std::vector<char> staging(total * es);
    size_t off = 0;
    for (auto& b : buffers) {
      std::memcpy(staging.data() + off, b.first, b.second * es);
      off += b.second * es;
    }
    allreduce(staging.data(), total, t, op, o);
    off = 0;
    for (auto& b : buffers) {
      std::memcpy(b.first, staging.data() + off, b.second * es);
      off += b.second * es;
    }
  }

  void broadcast(void* data, size_t count, DType t, int root, const Options& o) override {
    check_rank(root, "broadcast root");
    guard("broadcast", [&] {
      if (count == 0 || spec_.world_size == 1) return;
      if (shm_) return shm_->broadcast(data, count, t, root, o.timeout);
      if (sealed_) return sealed_->broadcast(data, count * dtype_size(t), root, o.tag, o.timeout);
      dispatch(t, [&](auto tag) {
        using T = decltype(tag);
        gloo::BroadcastOptions opts(context_);
        opts.setOutput(static_cast<T*>(data), count);
        opts.setRoot(root);
        opts.setTag(o.tag);
        opts.setTimeout(o.timeout);
        gloo::broadcast(opts);
      });
    });
  }

  void reduce(void* data, size_t count, DType t, ReduceOp op, int root, const Options& o) override {
    check_rank(root, "reduce root");
    guard("reduce", [&] {
      if (count == 0 || spec_.world_size == 1) return;
      if (t == DType::kBFloat16 && !shm_)
        return via_float32(data, count, [&](float* f) { reduce(f, count, DType::kFloat32, op, root, o); });
      if (shm_ || sealed_) {  // the whole reduction, kept by the root only
        std::vector<char> tmp(count * dtype_size(t));
        std::memcpy(tmp.data(), data, tmp.size());
        if (shm_)
          shm_->allreduce(tmp.data(), count, t, op, o.timeout);
        else
          dispatch(t, [&](auto tag) { sealed_allreduce<decltype(tag)>(tmp.data(), count, op, o); });
        if (spec_.rank == root) std::memcpy(data, tmp.data(), tmp.size());
        return;
      }
      dispatch(t, [&](auto tag) {
        using T = decltype(tag);
        gloo::ReduceOptions opts(context_);
        opts.setOutput(static_cast<T*>(data), count);
        opts.setRoot(root);
        opts.setReduceFunction(reducer<T>(op));
        opts.setTag(o.tag);
        opts.setTimeout(o.timeout);
        gloo::reduce(opts);
        if (op == ReduceOp::kAvg && spec_.rank == root) divide<T>(data, count, spec_.world_size);
      });
    });
  }

  void allgather(const void* in, void* out, size_t count, DType t, const Options& o) override {
    guard("allgather", [&] {
      size_t es = dtype_size(t);
      if (count == 0) return;
      if (spec_.world_size == 1) {
        std::memcpy(out, in, count * es);
        return;
      }
      if (shm_) return shm_->allgather(in, out, count, t, o.timeout);
      if (sealed_) return sealed_->allgather(in, out, count * es, o.tag, o.timeout);
      dispatch(t, [&](auto tag) {
        using T = decltype(tag);
        gloo::AllgatherOptions opts(context_);
        opts.setInput(const_cast<T*>(static_cast<const T*>(in)), count);
        opts.setOutput(static_cast<T*>(out), count * spec_.world_size);
        opts.setTag(o.tag);
        opts.setTimeout(o.timeout);
        gloo::allgather(opts);
      });
    });
  }

  void reduce_scatter(const void* in, void* out, size_t count, DType t, ReduceOp op, const Options& o) override {
    // The full reduction, then this rank's slice.
    size_t es = dtype_size(t);
    std::vector<char> all(count * spec_.world_size * es);
    if (!all.empty()) std::memcpy(all.data(), in, all.size());
    allreduce(all.data(), count * spec_.world_size, t, op, o);
    if (count) std::memcpy(out, all.data() + spec_.rank * count * es, count * es);
  }

  void barrier(const Options& o) override {
    guard("barrier", [&] {
      if (spec_.world_size == 1) return;
      if (shm_) return shm_->barrier(o.timeout);
      gloo::BarrierOptions opts(context_);
      opts.setTag(o.tag);
      opts.setTimeout(o.timeout);
      gloo::barrier(opts);
    });
  }

  void send(const void* data, size_t count, DType t, int peer, const Options& o) override {
    check_rank(peer, "send peer");
    guard("send", [&] {
      if (sealed_) return sealed_->send(data, count * dtype_size(t), peer, o.tag, o.timeout);
      if (shm_ && shm_->has_mail()) return shm_->send(data, count * dtype_size(t), peer, o.tag, o.timeout);
      auto buf = context_->createUnboundBuffer(const_cast<void*>(data), count * dtype_size(t));
      buf->send(peer, o.tag);
      if (!buf->waitSend(o.timeout))
        throw CollectiveError("send to rank " + std::to_string(peer) + " did not complete within " +
                              std::to_string(o.timeout.count()) + " ms");
    });
  }

  void recv(void* data, size_t count, DType t, int peer, const Options& o) override {
    check_rank(peer, "recv peer");
    guard("recv", [&] {
      if (sealed_) return sealed_->recv(data, count * dtype_size(t), peer, o.tag, o.timeout);
      if (shm_ && shm_->has_mail()) return shm_->recv(data, count * dtype_size(t), peer, o.tag, o.timeout);
      auto buf = context_->createUnboundBuffer(data, count * dtype_size(t));
      buf->recv(peer, o.tag);
      if (!buf->waitRecv(o.timeout))
        throw CollectiveError("nothing from rank " + std::to_string(peer) + " within " +
                              std::to_string(o.timeout.count()) + " ms");
    });
  }

  void destroy(const Options& o) override {
    stop_async();
    if (destroyed_) return;
    destroyed_ = true;
    // Everyone signs out; the last one out removes the keys, so no member still reading them
    // loses them and a re-created group starts clean.
    (void)o;
    if (store_->incr("left") >= spec_.world_size) store_->remove_all();
    shm_.reset();
    sealed_.reset();
    context_.reset();
  }

  ~GlooCommunicator() override {
    try {
      destroy({});
    } catch (...) {
    }
  }

 private:
  void check_rank(int r, const char* what) const {
    if (r < 0 || r >= spec_.world_size)
      throw CollectiveError("group '" + spec_.name + "': " + what + " " + std::to_string(r) +
                            " is outside world size " + std::to_string(spec_.world_size));
  }

  template <class T>
  void sealed_allreduce(void* data, size_t count, ReduceOp op, const Options& o) {
    sealed_->allreduce(data, count, sizeof(T), reducer<T>(op), o.tag, o.timeout);
    if (op == ReduceOp::kAvg) divide<T>(data, count, spec_.world_size);
  }

  // bfloat16 over TCP: reduced as float32, rounded back.
  template <class F>
  void via_float32(void* data, size_t count, F&& f) {
    auto* b = static_cast<uint16_t*>(data);
    std::vector<float> tmp(count);
    for (size_t i = 0; i < count; ++i) tmp[i] = bf16_to_float(b[i]);
    f(tmp.data());
    for (size_t i = 0; i < count; ++i) b[i] = float_to_bf16(tmp[i]);
  }

  template <class F>
  void guard(const char* op, F&& f) {
    if (destroyed_) throw CollectiveError("group '" + spec_.name + "' was destroyed");
    try {
      f();
    } catch (const CollectiveError& e) {
      throw CollectiveError("group '" + spec_.name + "' rank " + std::to_string(spec_.rank) + ": " + op +
                            " failed: " + e.what());
    } catch (const std::exception& e) {
      std::string dead = dead_peers(std::chrono::seconds(2));
      throw CollectiveError("group '" + spec_.name + "' rank " + std::to_string(spec_.rank) + ": " + op + " failed (" +
                            (dead.empty() ? std::string("a peer died, left or timed out")
                                          : "rank(s) " + dead + " died") +
                            "): " + e.what());
    }
  }

  // The ranks known dead after a failed operation, as "2" or "1, 3" ("" when none is known): on one
  // host, peers whose process is gone; otherwise what another rank published when its operation
  // failed (a failure that reached this rank through a survivor closing its connection names the
  // rank that died, not the survivor). Waits up to `patience` for either, as a killed peer's
  // sockets close before its process is gone. What this rank found it publishes for the others.
  std::string dead_peers(std::chrono::milliseconds patience) {
    auto deadline = std::chrono::steady_clock::now() + patience;
    for (;;) {
      std::string dead;
      for (size_t q = 0; q < peer_pids_.size(); ++q)
        if (peer_pids_[q] != getpid() && sys::process_dead(peer_pids_[q]))
          dead += (dead.empty() ? "" : ", ") + std::to_string(q);
      if (!dead.empty()) {
        try {
          store_->set("dead_seen_" + std::to_string(spec_.rank), std::vector<char>(dead.begin(), dead.end()));
        } catch (const std::exception&) {
          // the control store is out of reach: this rank's own error still names them
        }
        return dead;
      }
      try {
        for (int r = 0; r < spec_.world_size; ++r)
          if (r != spec_.rank)
            if (auto seen = store_->peek("dead_seen_" + std::to_string(r)); !seen.empty()) return seen;
      } catch (const std::exception&) {
        return {};
      }
      if (std::chrono::steady_clock::now() >= deadline) return {};
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polls the condition up to the deadline
    }
  }

  GroupSpec spec_;
  std::unique_ptr<GroupStore> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::unique_ptr<ShmChannel> shm_;
  std::unique_ptr<SealedRing> sealed_;  // across hosts with a link key (sealed_ring.h)
  std::vector<int> peer_pids_;  // when every rank is on this host
  bool destroyed_ = false;
};

}  // namespace

std::unique_ptr<Communicator> create_gloo(const GroupSpec& spec) {
  return std::make_unique<GlooCommunicator>(spec);
}

}  // namespace yard::collective
