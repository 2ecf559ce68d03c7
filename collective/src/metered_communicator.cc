// Every group's operations in the process's metrics (yard/metrics.h, exported by its node):
// yard_collective_operations_total, yard_collective_bytes_total and
// yard_collective_latency_seconds, by operation and backend. A communicator wrapped around the
// backend's: the backends stay as they are.
#include <chrono>
#include <memory>

#include "yard/collective.h"
#include "yard/metrics.h"

namespace yard::collective {

namespace {

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kNccl: return "nccl";
    case Backend::kGloo: return "gloo";
    default: return "auto";
  }
}

struct Families {
  metrics::Counter ops{"yard_collective_operations_total", "collective operations", {"op", "backend"}};
  metrics::Counter bytes{"yard_collective_bytes_total", "bytes of this rank's input to collective operations",
                         {"op", "backend"}};
  metrics::Histogram latency{"yard_collective_latency_seconds", "how long collective operations took",
                             {0.0001, 0.001, 0.01, 0.1, 1, 10, 60}, {"op", "backend"}};
  static Families& get() {
    static Families* f = new Families();
    return *f;
  }
};

class Metered final : public Communicator {
 public:
  explicit Metered(std::unique_ptr<Communicator> inner)
      : inner_(std::move(inner)), backend_(inner_->uses_shared_memory() ? "shm" : backend_name(inner_->backend())) {}
  ~Metered() override { stop_async(); }

  int rank() const override { return inner_->rank(); }
  int world_size() const override { return inner_->world_size(); }
  const std::string& name() const override { return inner_->name(); }
  Backend backend() const override { return inner_->backend(); }
  bool uses_shared_memory() const override { return inner_->uses_shared_memory(); }
  bool encrypts_traffic() const override { return inner_->encrypts_traffic(); }

  void allreduce(void* data, size_t count, DType t, ReduceOp op, const Options& o) override {
    timed("allreduce", count * dtype_size(t), [&] { inner_->allreduce(data, count, t, op, o); });
  }
  void allreduce_coalesced(const std::vector<std::pair<void*, size_t>>& buffers, DType t, ReduceOp op,
                           const Options& o) override {
    size_t n = 0;
    for (auto& b : buffers) n += b.second;
    timed("allreduce", n * dtype_size(t), [&] { inner_->allreduce_coalesced(buffers, t, op, o); });
  }
  void broadcast(void* data, size_t count, DType t, int root, const Options& o) override {
    timed("broadcast", count * dtype_size(t), [&] { inner_->broadcast(data, count, t, root, o); });
  }
  void reduce(void* data, size_t count, DType t, ReduceOp op, int root, const Options& o) override {
    timed("reduce", count * dtype_size(t), [&] { inner_->reduce(data, count, t, op, root, o); });
  }
  void allgather(const void* in, void* out, size_t count, DType t, const Options& o) override {
    timed("allgather", count * dtype_size(t), [&] { inner_->allgather(in, out, count, t, o); });
  }
  void reduce_scatter(const void* in, void* out, size_t count, DType t, ReduceOp op, const Options& o) override {
    timed("reduce_scatter", count * size_t(inner_->world_size()) * dtype_size(t),
          [&] { inner_->reduce_scatter(in, out, count, t, op, o); });
  }
  void barrier(const Options& o) override {
    timed("barrier", 0, [&] { inner_->barrier(o); });
  }
  void send(const void* data, size_t count, DType t, int peer, const Options& o) override {
    timed("send", count * dtype_size(t), [&] { inner_->send(data, count, t, peer, o); });
  }
  void recv(void* data, size_t count, DType t, int peer, const Options& o) override {
    timed("recv", count * dtype_size(t), [&] { inner_->recv(data, count, t, peer, o); });
  }
  void destroy(const Options& o) override {
    stop_async();
    inner_->destroy(o);
  }

 private:
  template <class F>
  void timed(const char* op, size_t bytes, F&& f) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    auto& m = Families::get();
    metrics::Tags tags{{"op", op}, {"backend", backend_}};
    m.ops.inc(1, tags);
    m.bytes.inc(double(bytes), tags);
    m.latency.observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), tags);
  }

  std::unique_ptr<Communicator> inner_;
  std::string backend_;
};

}  // namespace

std::unique_ptr<Communicator> metered(std::unique_ptr<Communicator> c) { return std::make_unique<Metered>(std::move(c)); }

}  // namespace yard::collective
