#include "yard/actors/torch_state.h"

#include <sstream>

namespace yard::actors {

namespace {
template <class T>
std::string save(const T& x) {
  torch::serialize::OutputArchive a;
  x.save(a);
  std::ostringstream out;
  a.save_to(out);
  return out.str();
}
template <class T>
void load(T& x, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive a;
  a.load_from(in);
  x.load(a);
}
}  // namespace

std::string state_bytes(const torch::nn::Module& m) { return save(m); }
std::string state_bytes(const torch::optim::Optimizer& o) { return save(o); }
void load_state(torch::nn::Module& m, const std::string& bytes) { load(m, bytes); }
void load_state(torch::optim::Optimizer& o, const std::string& bytes) { load(o, bytes); }

}  // namespace yard::actors
