#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "gloo_communicator.h"
#include "yard/collective.h"
#include "yard/yard.h"

namespace yard::collective {

namespace {
// Loads the NCCL backend library on first use; CPU-only programs never load it.
std::unique_ptr<Communicator> create_nccl(const GroupSpec& spec) {
  using Create = Communicator* (*)(const GroupSpec*, char*, size_t);
  static std::mutex mu;
  static Create create = nullptr;
  static std::string load_error;
  {
    std::lock_guard<std::mutex> l(mu);
    if (!create && load_error.empty()) {
      std::string path = getenv("YARD_NCCL_LIB") ? getenv("YARD_NCCL_LIB") : YARD_NCCL_LIB;
      if (path.empty()) path = "libyard_collective_nccl.so";
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!h) {
        load_error = std::string("the NCCL backend is not available (") + dlerror() + ")";
      } else {
        create = reinterpret_cast<Create>(dlsym(h, "yard_nccl_create"));
        if (!create) load_error = "the NCCL backend library has no yard_nccl_create";
      }
    }
  }
  if (!create) throw CollectiveError("group '" + spec.name + "': " + load_error);
  char err[1024] = {0};
  Communicator* c = create(&spec, err, sizeof err);
  if (!c) throw CollectiveError(err);
  return std::unique_ptr<Communicator>(c);
}
}  // namespace

GroupSpec cluster_group(const std::string& name, int world_size, int rank, const std::string& generation) {
  auto cs = yard::control_store();
  GroupSpec s;
  s.name = name;
  s.world_size = world_size;
  s.rank = rank;
  s.redis_address = cs.address;
  s.redis_password = cs.password;
  s.generation = generation;
  return s;
}

std::unique_ptr<Communicator> create_group(const GroupSpec& spec) {
  if (spec.name.empty()) throw CollectiveError("a group needs a name");
  if (spec.redis_address.empty())
    throw CollectiveError("group '" + spec.name + "': no rendezvous store address");
  Backend b = spec.backend;
  if (b == Backend::kAuto) b = spec.on_gpu ? Backend::kNccl : Backend::kGloo;
  if (b == Backend::kNccl) return create_nccl(spec);
  return create_gloo(spec);
}

}  // namespace yard::collective
