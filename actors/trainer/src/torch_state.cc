#include "yard/actors/torch_state.h"

#include <map>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

namespace yard::actors {

namespace {
std::string to_bytes(torch::serialize::OutputArchive& a) {
  std::ostringstream out;
  a.save_to(out);
  return out.str();
}
template <class T>
std::string save(const T& x) {
  torch::serialize::OutputArchive a;
  x.save(a);
  return to_bytes(a);
}
template <class T>
void load(T& x, const std::string& bytes) {
  std::istringstream in(bytes);
  torch::serialize::InputArchive a;
  a.load_from(in);
  x.load(a);
}

// A copy of a tensor's data that training can no longer change (requires_grad kept, so the
// serialised bytes are the same).
torch::Tensor copy_of(const torch::Tensor& t) {
  if (!t.defined()) return t;
  torch::NoGradGuard ng;
  auto c = t.detach().clone();
  if (t.requires_grad()) c.requires_grad_(true);
  return c;
}
}  // namespace

std::string state_bytes(const torch::nn::Module& m) { return save(m); }
std::string state_bytes(const torch::optim::Optimizer& o) { return save(o); }
void load_state(torch::nn::Module& m, const std::string& bytes) { load(m, bytes); }
void load_state(torch::optim::Optimizer& o, const std::string& bytes) { load(o, bytes); }

// What Module::save writes: own parameters, own buffers, then each serialisable child's archive.
struct StateSnapshot::ModuleCopy {
  std::vector<std::pair<std::string, torch::Tensor>> parameters, buffers;
  std::vector<std::pair<std::string, std::shared_ptr<const ModuleCopy>>> children;

  void write(torch::serialize::OutputArchive& a) const {
    for (auto& [k, t] : parameters) a.write(k, t);
    for (auto& [k, t] : buffers) a.write(k, t, /*is_buffer=*/true);
    for (auto& [k, c] : children) {
      torch::serialize::OutputArchive ca(a.compilation_unit());
      c->write(ca);
      a.write(k, ca);
    }
  }
};

namespace {
std::shared_ptr<const StateSnapshot::ModuleCopy> copy_module(const torch::nn::Module& m) {
  auto c = std::make_shared<StateSnapshot::ModuleCopy>();
  for (auto& p : m.named_parameters(/*recurse=*/false)) c->parameters.emplace_back(p.key(), copy_of(p.value()));
  for (auto& b : m.named_buffers(/*recurse=*/false)) c->buffers.emplace_back(b.key(), copy_of(b.value()));
  for (auto& child : m.named_children()) {
    if (!child.value()->is_serializable()) continue;
    c->children.emplace_back(child.key(), copy_module(*child.value()));
  }
  return c;
}

// A new optimizer of the same kind over the same parameters (the serialised param groups name
// them by identity, so the bytes come out the same) with copies of every state tensor.
template <class Opt, class State, class Options>
std::shared_ptr<const torch::optim::Optimizer> copy_optimizer(const Opt& o) {
  std::vector<torch::optim::OptimizerParamGroup> groups(o.param_groups().begin(), o.param_groups().end());
  auto c = std::make_shared<Opt>(std::move(groups), static_cast<const Options&>(o.defaults()));
  for (auto& [key, s] : o.state()) {
    auto st = std::make_unique<State>(static_cast<const State&>(*s));
    if constexpr (std::is_same_v<State, torch::optim::SGDParamState>) {
      st->momentum_buffer(copy_of(st->momentum_buffer()));
    } else {
      st->exp_avg(copy_of(st->exp_avg()));
      st->exp_avg_sq(copy_of(st->exp_avg_sq()));
      st->max_exp_avg_sq(copy_of(st->max_exp_avg_sq()));
    }
    c->state()[key] = std::move(st);
  }
  return c;
}
}  // namespace

StateSnapshot::StateSnapshot(const torch::nn::Module& m) : module_(copy_module(m)) {}

StateSnapshot::StateSnapshot(const torch::optim::Optimizer& o) {
  using namespace torch::optim;
  if (auto* a = dynamic_cast<const AdamW*>(&o)) optimizer_ = copy_optimizer<AdamW, AdamWParamState, AdamWOptions>(*a);
  else if (auto* b = dynamic_cast<const Adam*>(&o)) optimizer_ = copy_optimizer<Adam, AdamParamState, AdamOptions>(*b);
  else if (auto* s = dynamic_cast<const SGD*>(&o)) optimizer_ = copy_optimizer<SGD, SGDParamState, SGDOptions>(*s);
  else bytes_ = save(o);
}

std::string StateSnapshot::bytes() const {
  if (optimizer_) return save(*optimizer_);
  if (!module_) return bytes_;
  torch::serialize::OutputArchive a;
  module_->write(a);
  return to_bytes(a);
}

// The tree of archives Module::save writes (ModuleCopy's), from the parameters' dotted names.
std::string module_state_bytes(const NamedTensors& named) {
  auto root = std::make_shared<StateSnapshot::ModuleCopy>();
  std::map<std::string, std::shared_ptr<StateSnapshot::ModuleCopy>> made;  // module path -> its copy
  for (auto& [name, t] : named) {
    auto at = root;
    size_t from = 0;
    for (size_t dot = name.find('.'); dot != std::string::npos; from = dot + 1, dot = name.find('.', from)) {
      auto& child = made[name.substr(0, dot)];
      if (!child) {
        child = std::make_shared<StateSnapshot::ModuleCopy>();
        at->children.emplace_back(name.substr(from, dot - from), child);
      }
      at = child;
    }
    at->parameters.emplace_back(name.substr(from), t);
  }
  torch::serialize::OutputArchive a;
  root->write(a);
  return to_bytes(a);
}

std::string named_bytes(const NamedTensors& named) {
  torch::serialize::OutputArchive a;
  std::string names;
  for (size_t i = 0; i < named.size(); ++i) {
    names += named[i].first + "\n";
    a.write("t" + std::to_string(i), named[i].second.detach());
  }
  a.write("names", torch::from_blob(names.data(), {static_cast<int64_t>(names.size())}, torch::kUInt8).clone());
  return to_bytes(a);
}

NamedTensors from_named_bytes(const std::string& bytes) {
  NamedTensors out;
  try {
    std::istringstream in(bytes);
    torch::serialize::InputArchive a;
    a.load_from(in);
    torch::Tensor names;
    a.read("names", names);
    std::string all(reinterpret_cast<const char*>(names.data_ptr<uint8_t>()), static_cast<size_t>(names.numel()));
    size_t from = 0;
    for (size_t nl = all.find('\n'); nl != std::string::npos; from = nl + 1, nl = all.find('\n', from)) {
      torch::Tensor t;
      a.read("t" + std::to_string(out.size()), t);
      out.emplace_back(all.substr(from, nl - from), t);
    }
  } catch (const c10::Error& e) {
    throw std::runtime_error("named tensors' bytes do not read: " + std::string(e.what_without_backtrace()));
  }
  return out;
}

}  // namespace yard::actors
