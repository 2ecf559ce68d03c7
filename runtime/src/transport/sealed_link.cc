#include "sealed_link.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace yard::detail {

namespace {

constexpr size_t kNonceBytes = 12;

void frame_nonce(const unsigned char* base, uint16_t index, unsigned char out[kNonceBytes]) {
  std::memcpy(out, base, kNonceBytes);
  uint32_t tail = 0;
  std::memcpy(&tail, out + 8, 4);
  tail += index;
  std::memcpy(out + 8, &tail, 4);
}

void put16(unsigned char* p, uint16_t v) {
  p[0] = static_cast<unsigned char>(v);
  p[1] = static_cast<unsigned char>(v >> 8);
}
uint16_t get16(const unsigned char* p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

// The associated data: the direction, then the frame's index and count as in its header.
void aad_of(SealedAs as, const unsigned char* header, unsigned char out[5]) {
  out[0] = static_cast<unsigned char>(as);
  std::memcpy(out + 1, header + kNonceBytes, 4);
}

// A received frame whose plaintext lies inside it: the view keeps the received frame alive.
zmq::message_t view_of(zmq::message_t whole, size_t offset, size_t size) {
  auto* keep = new zmq::message_t(std::move(whole));
  auto* data = static_cast<char*>(keep->data()) + offset;
  return zmq::message_t(data, size, [](void*, void* hint) { delete static_cast<zmq::message_t*>(hint); }, keep);
}

// A frame opened into a room elsewhere: the view holds the room's keep.
zmq::message_t view_of(const LinkSeal::Room& room, size_t size) {
  auto* keep = new std::shared_ptr<const void>(room.keep);
  return zmq::message_t(room.data, size, [](void*, void* hint) { delete static_cast<std::shared_ptr<const void>*>(hint); },
                        keep);
}

}  // namespace

std::string LinkSeal::make_key() {
  std::string key(kKeyBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(key.data()), static_cast<int>(kKeyBytes)) != 1)
    throw std::runtime_error("no randomness for a data link's key");
  return key;
}

LinkSeal::LinkSeal(const std::string& key) : ctx_(EVP_CIPHER_CTX_new()) {
  if (!ctx_) throw std::runtime_error("cannot set up AES-GCM");
  if (key.size() != kKeyBytes) {
    EVP_CIPHER_CTX_free(ctx_);
    throw std::invalid_argument("a data link's key has " + std::to_string(key.size()) + " bytes, not " +
                                std::to_string(kKeyBytes));
  }
  std::memcpy(key_, key.data(), kKeyBytes);
}

LinkSeal::~LinkSeal() {
  EVP_CIPHER_CTX_free(ctx_);
  OPENSSL_cleanse(key_, sizeof key_);
}

void LinkSeal::seal(Frames& frames, SealedAs as) {
  if (frames.size() > 0xFFFF) throw std::invalid_argument("a message of more than 65535 frames cannot be sealed");
  unsigned char base[kNonceBytes];
  if (RAND_bytes(base, sizeof base) != 1) throw std::runtime_error("no randomness for a sealed message");
  auto count = static_cast<uint16_t>(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto& plain = frames[i];
    size_t n = plain.size();
    zmq::message_t out(kHeaderBytes + n + kTagBytes);
    auto* o = static_cast<unsigned char*>(out.data());
    std::memcpy(o, base, kNonceBytes);
    put16(o + kNonceBytes, static_cast<uint16_t>(i));
    put16(o + kNonceBytes + 2, count);
    unsigned char iv[kNonceBytes], aad[5];
    frame_nonce(base, static_cast<uint16_t>(i), iv);
    aad_of(as, o, aad);
    int len = 0;
    bool ok = EVP_EncryptInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, key_, iv) == 1 &&
              EVP_EncryptUpdate(ctx_, nullptr, &len, aad, sizeof aad) == 1 &&
              (n == 0 || EVP_EncryptUpdate(ctx_, o + kHeaderBytes, &len, static_cast<const unsigned char*>(plain.data()),
                                           static_cast<int>(n)) == 1) &&
              EVP_EncryptFinal_ex(ctx_, o + kHeaderBytes + n, &len) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, kTagBytes, o + kHeaderBytes + n) == 1;
    if (!ok) throw std::runtime_error("sealing a message for a data link failed");
    frames[i] = std::move(out);
  }
}

bool LinkSeal::open(Frames& frames, SealedAs as, const Landing& land) {
  if (frames.empty() || frames.size() > 0xFFFF) return false;
  const unsigned char* base = nullptr;
  for (size_t i = 0; i < frames.size(); ++i) {
    auto& f = frames[i];
    if (f.size() < kHeaderBytes + kTagBytes) return false;
    auto* m = static_cast<unsigned char*>(f.data());
    if (get16(m + kNonceBytes) != i || get16(m + kNonceBytes + 2) != frames.size()) return false;
    if (!base)
      base = m;
    else if (std::memcmp(base, m, kNonceBytes) != 0)
      return false;
  }
  unsigned char first[kNonceBytes];
  std::memcpy(first, base, kNonceBytes);
  std::vector<Room> landed(frames.size());
  for (size_t i = 0; i < frames.size(); ++i) {
    auto* m = static_cast<unsigned char*>(frames[i].data());
    size_t n = frames[i].size() - kHeaderBytes - kTagBytes;
    if (i > 0 && land) {
      auto* f0 = static_cast<const char*>(frames[0].data()) + kHeaderBytes;
      landed[i] = land(f0, frames[0].size() - kHeaderBytes - kTagBytes, i, n);
    }
    auto* out = landed[i].data ? reinterpret_cast<unsigned char*>(landed[i].data) : m + kHeaderBytes;
    unsigned char iv[kNonceBytes], aad[5];
    frame_nonce(first, static_cast<uint16_t>(i), iv);
    aad_of(as, m, aad);
    int len = 0;
    bool ok = EVP_DecryptInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, key_, iv) == 1 &&
              EVP_DecryptUpdate(ctx_, nullptr, &len, aad, sizeof aad) == 1 &&
              (n == 0 || EVP_DecryptUpdate(ctx_, out, &len, m + kHeaderBytes, static_cast<int>(n)) == 1) &&
              EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, kTagBytes, m + kHeaderBytes + n) == 1 &&
              EVP_DecryptFinal_ex(ctx_, out + n, &len) == 1;
    if (!ok) return false;
  }
  for (size_t i = 0; i < frames.size(); ++i) {
    size_t n = frames[i].size() - kHeaderBytes - kTagBytes;
    if (landed[i].data)
      frames[i] = view_of(landed[i], n);
    else
      frames[i] = view_of(std::move(frames[i]), kHeaderBytes, n);
  }
  return true;
}

}  // namespace yard::detail
