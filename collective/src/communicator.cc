#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "gloo_communicator.h"
#include "yard/collective.h"
#include "yard/yard.h"

namespace yard::collective {

namespace {
// Where the NCCL backend library may be: YARD_NCCL_LIB; beside the collective library (installed:
// the same libdir) or the program it is linked into (a build tree: ../collective); else by name,
// through the dynamic linker's search path.
std::vector<std::string> nccl_candidates() {
  namespace fs = std::filesystem;
  const char* name = "libyard_collective_nccl.so";
  if (const char* p = getenv("YARD_NCCL_LIB"); p && *p) return {p};
  std::vector<std::string> out;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&nccl_candidates), &info) && info.dli_fname) {
    auto dir = fs::path(info.dli_fname).parent_path();
    for (auto d : {dir, dir.parent_path() / "collective", dir.parent_path().parent_path() / "collective"}) {
      std::error_code ec;
      if (fs::exists(d / name, ec)) out.push_back((d / name).string());
    }
  }
  out.push_back(name);
  return out;
}

// Loads the NCCL backend library on first use; CPU-only programs never load it.
std::unique_ptr<Communicator> create_nccl(const GroupSpec& spec) {
  using Create = Communicator* (*)(const GroupSpec*, char*, size_t);
  static std::mutex mu;
  static Create create = nullptr;
  static std::string load_error;
  {
    std::lock_guard<std::mutex> l(mu);
    if (!create && load_error.empty()) {
      void* h = nullptr;
      std::string tried;
      for (auto& path : nccl_candidates()) {
        if ((h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL))) break;
        tried += (tried.empty() ? "" : "; ") + std::string(dlerror());
      }
      if (!h) {
        load_error = "the NCCL backend is not available (" + tried + ")";
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
  GroupSpec s;
  s.name = name;
  s.world_size = world_size;
  s.rank = rank;
  s.rendezvous = yard::job_rendezvous("collective");
  s.generation = generation;
  auto link = yard::link_settings("collective");
  s.host = link.host;
  s.link_key = link.key;
  return s;
}

// The communicator with its operations counted in the process's metrics (metered_communicator.cc).
std::unique_ptr<Communicator> metered(std::unique_ptr<Communicator> c);

std::unique_ptr<Communicator> create_group(const GroupSpec& spec) {
  if (spec.name.empty()) throw CollectiveError("a group needs a name");
  if (!spec.rendezvous)
    throw CollectiveError("group '" + spec.name + "': no rendezvous store (GroupSpec::rendezvous)");
  Backend b = spec.backend;
  if (b == Backend::kAuto) b = spec.on_gpu ? Backend::kNccl : Backend::kGloo;
  return metered(b == Backend::kNccl ? create_nccl(spec) : create_gloo(spec));
}

}  // namespace yard::collective
