// libFuzzer target: the binary files a training job reads back: training shards and checkpoints.
// Each input is read as it is, and again with its trailing CRC-32 made right, so that the parsing
// behind the checksum is reached too. A reader may refuse its input (an exception); it must never
// crash, allocate without bound or read out of bounds. Seeds are files the project writes.
#include <cstring>
#include <filesystem>

#include "fuzz_support.h"
#include "yard/actors/checkpoint.h"
#include "yard/actors/crc32.h"
#include "yard/railway/shards.h"

namespace {

void read_both(const std::string& path) {
  try {
    auto w = yard::railway::read_shard(path);
    for (auto& x : w) (void)x.x.size();
  } catch (const std::exception&) {
  }
  try {
    (void)yard::actors::CheckpointStore::read_file(path);
  } catch (const std::exception&) {
  }
}

void make_seeds(const std::string& dir) {
  auto tmp = std::filesystem::path(dir) / "tmp";
  std::filesystem::create_directories(tmp);
  std::vector<yard::railway::Window> windows(2);
  yard::railway::ShardOptions o;
  o.tokens = 4;
  o.windows_per_shard = 2;
  for (size_t i = 0; i < windows.size(); ++i) {
    windows[i].start_chainage = 100.0 * double(i);
    windows[i].label = uint8_t(i);
    windows[i].amplitude_mm = 0.5f;
    windows[i].x.assign(o.tokens * yard::railway::kFeatures, 0.25f);
    windows[i].token_label.assign(o.tokens, uint8_t(i));
  }
  auto m = yard::railway::write_shards(windows, tmp.string(), o);
  for (size_t i = 0; i < m.files.size(); ++i) {
    auto src = std::filesystem::path(m.files[i]);
    if (src.is_relative()) src = tmp / src;
    std::filesystem::copy_file(src, std::filesystem::path(dir) / ("shard" + std::to_string(i)));
  }
  {
    yard::actors::CheckpointStore store((tmp / "ckpt").string(), 1);
    yard::actors::Checkpoint c;
    c.step = 120;
    c.blobs["model"] = std::string(64, 'm');
    c.blobs["optimizer"] = "adamw";
    c.blobs["loader"] = "epoch=2";
    std::filesystem::copy_file(store.write(c), std::filesystem::path(dir) / "checkpoint");
  }
  std::filesystem::remove_all(tmp);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::initialize(make_seeds, true); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  read_both(fuzz::write_input(data, size));
  if (size >= 4) {
    std::string fixed(reinterpret_cast<const char*>(data), size);
    uint32_t crc = yard::actors::crc32(reinterpret_cast<const uint8_t*>(fixed.data()), size - 4);
    std::memcpy(fixed.data() + size - 4, &crc, 4);
    read_both(fuzz::write_input(reinterpret_cast<const uint8_t*>(fixed.data()), size));
  }
  return 0;
}
