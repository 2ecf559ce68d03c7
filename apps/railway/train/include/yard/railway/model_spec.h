// What a railway model checkpoint must say about itself to be used on new logs: its shape, the
// features it was trained on (by name, in order) and their normalisation. Stored as the JSON blob
// "model_spec" of every checkpoint the training job writes. No LibTorch here.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "yard/railway/shards.h"

namespace yard::railway {

// The parameter tensors of the railway model with `layers` encoder layers: the input projection
// (2) and the positions (1), 12 per encoder layer, the three heads (6). What a split of the model
// (parameter-server shards) is checked against before any actor starts; the trainers check that
// the model they build has as many.
inline int64_t railway_parameter_tensors(int64_t layers) { return 9 + 12 * layers; }

struct ModelSpec {
  int64_t tokens = 128, stride = 64, features = kFeatures, d_model = 64, layers = 2, heads = 4;
  std::vector<std::string> feature_names;
  std::vector<float> mean, sd;  // per feature
  bool aligned = true;          // trained on aligned shards

  std::string to_json() const {
    return nlohmann::json{{"tokens", tokens},   {"stride", stride}, {"features", features},
                          {"d_model", d_model}, {"layers", layers}, {"heads", heads},
                          {"feature_names", feature_names}, {"mean", mean}, {"sd", sd}, {"aligned", aligned}}
        .dump();
  }
  // Throws std::runtime_error saying what is missing or does not fit this program's features.
  static ModelSpec from_json(const std::string& text, const std::string& where) {
    ModelSpec m;
    try {
      auto j = nlohmann::json::parse(text);
      m.tokens = j.at("tokens"), m.stride = j.at("stride"), m.features = j.at("features");
      m.d_model = j.at("d_model"), m.layers = j.at("layers"), m.heads = j.at("heads");
      m.feature_names = j.at("feature_names").get<std::vector<std::string>>();
      m.mean = j.at("mean").get<std::vector<float>>();
      m.sd = j.at("sd").get<std::vector<float>>();
      m.aligned = j.value("aligned", true);
    } catch (const nlohmann::json::exception& e) {
      throw std::runtime_error(where + ": the model description is unreadable (" + e.what() + ")");
    }
    const auto& ours = yard::railway::feature_names();
    if (m.feature_names != ours)
      throw std::runtime_error(where + ": the model was trained on " + std::to_string(m.feature_names.size()) +
                               " features (" + nlohmann::json(m.feature_names).dump() + "), this program computes " +
                               std::to_string(ours.size()) + " (" + nlohmann::json(ours).dump() + ")");
    if (m.mean.size() != kFeatures || m.sd.size() != kFeatures || m.tokens < 8 || m.stride < 1 || m.stride > m.tokens)
      throw std::runtime_error(where + ": the model description is inconsistent (normalisation or window size)");
    return m;
  }
};

}  // namespace yard::railway
