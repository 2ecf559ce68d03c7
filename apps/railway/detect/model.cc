// The trained model over a log's windows: read from a checkpoint, run in batches on every core.
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <thread>

#include "detect_impl.h"
#include "yard/actors/checkpoint.h"
#include "yard/actors/torch_state.h"
#include "yard/railway/model.h"
#include "yard/railway/model_spec.h"

namespace fs = std::filesystem;

namespace railway_detect {

namespace {

// The checkpoint file itself, or the newest one that verifies in a directory.
yard::actors::Checkpoint read_checkpoint(const std::string& path, std::string& used) {
  if (!fs::exists(path)) throw std::runtime_error(path + ": no such checkpoint file or directory");
  auto read = [](const std::string& file) {
    try {
      return yard::actors::CheckpointStore::read_file(file);
    } catch (const std::exception& e) {
      std::string why = e.what();
      throw std::runtime_error(why.find(file) == std::string::npos ? file + ": " + why : why);
    }
  };
  if (!fs::is_directory(path)) {
    used = path;
    return read(path);
  }
  // Newest written first (a directory may hold several runs, and each run its replicas).
  std::vector<std::pair<fs::file_time_type, std::string>> found;
  for (auto& e : fs::recursive_directory_iterator(path)) {
    auto name = e.path().filename().string();
    if (e.is_regular_file() && name.rfind("ckpt-", 0) == 0 && name.size() > 9 && name.substr(name.size() - 4) == ".bin")
      found.emplace_back(e.last_write_time(), e.path().string());
  }
  std::sort(found.rbegin(), found.rend());
  std::string why;
  for (auto& [when, file] : found) {
    try {
      used = file;
      return read(file);
    } catch (const std::exception& e) {
      why += std::string("\n  ") + e.what();
    }
  }
  throw std::runtime_error(path + ": no checkpoint that verifies (ckpt-*.bin)" + why);
}

}  // namespace

struct WindowModel::Impl {
  yard::railway::ModelSpec spec;
  RailwayNet net{nullptr};
  torch::Tensor mean, sd;
  std::string path;
};

WindowModel::WindowModel(const std::string& checkpoint) : impl_(std::make_unique<Impl>()) {
  auto& m = *impl_;
  auto c = read_checkpoint(checkpoint, m.path);
  auto spec = c.blobs.find("model_spec");
  if (spec == c.blobs.end())
    throw std::runtime_error(m.path + ": no model description (model_spec): not written by railway-train, or by an "
                             "older version of it; train again");
  m.spec = yard::railway::ModelSpec::from_json(spec->second, m.path);
  if (!c.blobs.count("model")) throw std::runtime_error(m.path + ": no model weights in the checkpoint");
  m.net = RailwayNet(m.spec.features, m.spec.tokens, m.spec.d_model, m.spec.layers, m.spec.heads);
  m.net->eval();
  try {
    // Loading replaces tensors whatever their shape: a window through the model shows a misfit.
    yard::actors::load_state(*m.net, c.blobs.at("model"));
    torch::NoGradGuard ng;
    m.net->forward(torch::zeros({1, m.spec.tokens, m.spec.features}));
  } catch (const std::exception& e) {
    std::string why = e.what();
    why = why.substr(0, why.find('\n'));  // LibTorch appends its backtrace
    throw std::runtime_error(m.path + ": the weights do not fit the model it describes (d_model " +
                             std::to_string(m.spec.d_model) + ", " + std::to_string(m.spec.layers) + " layers): " + why);
  }
  m.mean = torch::tensor(m.spec.mean).reshape({1, 1, -1});
  m.sd = torch::tensor(m.spec.sd).reshape({1, 1, -1});
}

WindowModel::~WindowModel() = default;
WindowModel::WindowModel(WindowModel&&) noexcept = default;

const std::string& WindowModel::path() const { return impl_->path; }
int64_t WindowModel::tokens() const { return impl_->spec.tokens; }
int64_t WindowModel::stride() const { return impl_->spec.stride; }
bool WindowModel::aligned() const { return impl_->spec.aligned; }

std::vector<WindowOutput> WindowModel::run(const yard::railway::TokenGrid& g, const std::vector<size_t>& starts,
                                           int threads) const {
  auto& m = *impl_;
  torch::NoGradGuard ng;
  torch::set_num_threads(threads > 0 ? threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  const int64_t T = m.spec.tokens, F = m.spec.features, batch = 256;
  std::vector<WindowOutput> out;
  for (size_t first = 0; first < starts.size(); first += batch) {
    int64_t n = static_cast<int64_t>(std::min<size_t>(batch, starts.size() - first));
    auto x = torch::empty({n, T, F});
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(x[i].data_ptr<float>(), g.x.data() + starts[first + size_t(i)] * size_t(F), size_t(T * F) * sizeof(float));
    auto o = m.net->forward((x - m.mean) / m.sd);
    auto pc = o.cls.softmax(1).contiguous(), pt = o.tokens.softmax(2).contiguous(), amp = o.amp.contiguous();
    for (int64_t i = 0; i < n; ++i) {
      WindowOutput w;
      w.start = starts[first + size_t(i)];
      w.cls.assign(pc[i].data_ptr<float>(), pc[i].data_ptr<float>() + 5);
      w.tokens.assign(pt[i].data_ptr<float>(), pt[i].data_ptr<float>() + T * 5);
      w.amplitude_mm = amp[i].item<float>();
      out.push_back(std::move(w));
    }
  }
  return out;
}

}  // namespace railway_detect
