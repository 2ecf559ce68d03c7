// libFuzzer target: opening a message that arrived on a data link (sealed_link.h), where anyone who
// can reach the port may send anything. The input's first byte says how many frames follow (1-4);
// each frame is a two-byte length (little-endian) and its bytes, the last taking what is left.
// LinkSeal::open must refuse whatever was not sealed with the key, without crashing or reading
// out of bounds, and what it opens must be exactly what was sealed, in place or landed in a room
// of the fetcher's (as replies are). Seeds are sealed messages.
#include <cstring>
#include <vector>

#include "fuzz_support.h"
#include "yard/internal/messaging.h"

using namespace yard::detail;

namespace {

const std::string& key() {
  static const std::string k(LinkSeal::kKeyBytes, 'k');
  return k;
}

std::string encode(const Frames& frames) {
  std::string s(1, char(frames.size()));
  for (size_t i = 0; i < frames.size(); ++i) {
    size_t n = frames[i].size();
    if (i + 1 < frames.size()) {
      s += char(n & 0xFF);
      s += char(n >> 8);
    }
    s.append(static_cast<const char*>(frames[i].data()), n);
  }
  return s;
}

void make_seeds(const std::string& dir) {
  LinkSeal seal(key());
  int k = 0;
  for (auto parts : {std::vector<std::string>{"an envelope"}, std::vector<std::string>{"an envelope", std::string(300, 'v')},
                     std::vector<std::string>{"", "x", "yz"}}) {
    for (auto as : {SealedAs::request, SealedAs::reply}) {
      Frames f;
      for (auto& p : parts) f.emplace_back(p.data(), p.size());
      seal.seal(f, as);
      fuzz::write_seed(dir, "sealed_" + std::to_string(k++), encode(f));
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::initialize(make_seeds, false); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  size_t count = (data[0] & 3) + 1, at = 1;
  Frames frames;
  for (size_t i = 0; i < count; ++i) {
    size_t n = size - at;
    if (i + 1 < count) {
      if (size - at < 2) return 0;
      n = std::min<size_t>(data[at] | (data[at + 1] << 8), size - at - 2);
      at += 2;
    }
    frames.emplace_back(data + at, n);
    at += n;
  }
  static LinkSeal seal(key());
  static std::vector<char> room(1 << 16);
  for (auto as : {SealedAs::request, SealedAs::reply}) {
    Frames copy;
    for (auto& f : frames) copy.emplace_back(f.data(), f.size());
    // Replies as a fetcher opens them: a frame after the first lands in a room when it fits.
    LinkSeal::Landing land;
    if (as == SealedAs::reply)
      land = [](const char*, size_t, size_t, size_t size) {
        return size <= room.size() ? LinkSeal::Room{room.data(), nullptr} : LinkSeal::Room{};
      };
    if (!seal.open(copy, as, land)) continue;
    // Opened: sealing the plaintext again and opening it gives the same bytes.
    Frames again;
    for (auto& f : copy) again.emplace_back(f.data(), f.size());
    seal.seal(again, as);
    if (!seal.open(again, as) || again.size() != copy.size()) __builtin_trap();
    for (size_t i = 0; i < copy.size(); ++i)
      if (again[i].size() != copy[i].size() || std::memcmp(again[i].data(), copy[i].data(), copy[i].size()) != 0)
        __builtin_trap();
  }
  return 0;
}
