// What the libFuzzer targets share: a scratch file for readers that take a path, and seed files.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace fuzz {

// The input as a file of this process's own (readers of logs, shards and checkpoints take paths).
inline const std::string& write_input(const uint8_t* data, size_t size) {
  static const std::string path = [] {
    auto dir = std::filesystem::exists("/dev/shm") ? std::filesystem::path("/dev/shm")
                                                   : std::filesystem::temp_directory_path();
    return (dir / ("yard-fuzz-" + std::to_string(getpid()))).string();
  }();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  return path;
}

inline void remove_input_at_exit() {
  static bool once = [] {
    std::atexit([] { std::filesystem::remove("/dev/shm/yard-fuzz-" + std::to_string(getpid())); });
    return true;
  }();
  (void)once;
}

inline void write_seed(const std::string& dir, const std::string& name, const std::string& bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// FUZZ_MAKE_SEEDS=DIR: the directory a target writes its seeds to (then it exits); empty otherwise.
inline std::string seed_dir() {
  const char* d = std::getenv("FUZZ_MAKE_SEEDS");
  return d ? d : "";
}

// What every target's LLVMFuzzerInitialize does: with FUZZ_MAKE_SEEDS set, writes the seeds there
// and exits; otherwise, for a target that reads its input from a file, removes that file at exit.
inline int initialize(void (*make_seeds)(const std::string& dir), bool file_input) {
  if (auto dir = seed_dir(); !dir.empty()) {
    make_seeds(dir);
    std::exit(0);
  }
  if (file_input) remove_input_at_exit();
  return 0;
}

// The first `lines` lines of a file (a seed cut from a real file the project writes).
inline std::string head_lines(const std::string& path, int lines) {
  std::ifstream in(path, std::ios::binary);
  std::string out, line;
  for (int i = 0; i < lines && std::getline(in, line); ++i) out += line + "\n";
  return out;
}

}  // namespace fuzz
