#include "sealed_ring.h"

#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include "rendezvous_store.h"
#include "yard/process.h"

namespace yard::collective {

// One direction's AES-256-GCM key. A sealed segment is [counter: 8 bytes LE][ciphertext][tag: 16];
// the nonce is four zero bytes and the counter; the associated data names sender and receiver.
class LinkCipher {
 public:
  LinkCipher(const uint8_t key[32], int from, int to) : ctx_(EVP_CIPHER_CTX_new()), from_(from), to_(to) {
    std::memcpy(key_, key, 32);
    int32_t ends[2] = {from, to};
    std::memcpy(aad_, ends, sizeof ends);
    if (!ctx_) throw CollectiveError("cannot set up AES-GCM");
  }
  ~LinkCipher() {
    EVP_CIPHER_CTX_free(ctx_);
    OPENSSL_cleanse(key_, sizeof key_);
  }

  void seal(uint64_t counter, const void* plain, size_t len, uint8_t* out) {
    uint8_t iv[12];
    nonce(counter, iv);
    for (int i = 0; i < 8; ++i) out[i] = uint8_t(counter >> (8 * i));
    int n = 0;
    bool ok = EVP_EncryptInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, key_, iv) == 1 &&
              EVP_EncryptUpdate(ctx_, nullptr, &n, aad_, sizeof aad_) == 1 &&
              (len == 0 || EVP_EncryptUpdate(ctx_, out + 8, &n, static_cast<const uint8_t*>(plain), int(len)) == 1) &&
              EVP_EncryptFinal_ex(ctx_, out + 8 + len, &n) == 1 &&
              EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_GET_TAG, 16, out + 8 + len) == 1;
    if (!ok) throw CollectiveError("sealing a message for rank " + std::to_string(to_) + " failed");
  }

  // Opens a sealed segment of `len` plaintext bytes in place (the plaintext lands at msg + 8, or
  // at `dst` when given). Returns its counter; throws when it is not authentic.
  uint64_t open(uint8_t* msg, size_t len, uint8_t* dst) {
    uint64_t counter = 0;
    for (int i = 0; i < 8; ++i) counter |= uint64_t(msg[i]) << (8 * i);
    uint8_t iv[12];
    nonce(counter, iv);
    uint8_t* out = dst ? dst : msg + 8;
    int n = 0;
    bool ok = EVP_DecryptInit_ex(ctx_, EVP_aes_256_gcm(), nullptr, key_, iv) == 1 &&
              EVP_DecryptUpdate(ctx_, nullptr, &n, aad_, sizeof aad_) == 1 &&
              (len == 0 || EVP_DecryptUpdate(ctx_, out, &n, msg + 8, int(len)) == 1) &&
              EVP_CIPHER_CTX_ctrl(ctx_, EVP_CTRL_GCM_SET_TAG, 16, msg + 8 + len) == 1 &&
              EVP_DecryptFinal_ex(ctx_, out + len, &n) == 1;
    if (!ok)
      throw CollectiveError("a message from rank " + std::to_string(from_) +
                            " failed authentication (not sealed with this group's key, or altered on the way)");
    return counter;
  }

 private:
  static void nonce(uint64_t counter, uint8_t iv[12]) {
    std::memset(iv, 0, 4);
    for (int i = 0; i < 8; ++i) iv[4 + i] = uint8_t(counter >> (8 * i));
  }

  EVP_CIPHER_CTX* ctx_;
  uint8_t key_[32];
  uint8_t aad_[8];  // the associated data: sender and receiver ranks
  int from_, to_;
};

namespace {

// HMAC-SHA256(link key, label | group | generation | a | b | salt_a | salt_b): the key of
// direction a -> b.
void direction_key(const GroupSpec& spec, int a, int b, const std::string& salt_a, const std::string& salt_b,
                   uint8_t out[32]) {
  std::string msg = std::string("switchyard collective link 1") + '\0' + spec.name + '\0' + spec.generation + '\0' +
                    std::to_string(a) + '\0' + std::to_string(b) + '\0' + salt_a + '\0' + salt_b;
  unsigned int n = 32;
  if (!HMAC(EVP_sha256(), spec.link_key.data(), int(spec.link_key.size()),
            reinterpret_cast<const uint8_t*>(msg.data()), msg.size(), out, &n) || n != 32)
    throw CollectiveError("group '" + spec.name + "': cannot derive its link keys");
}

uint64_t slot_of(uint32_t tag, size_t segment) {
  // Gloo's own algorithms use small prefixes in the top byte; 0xA5 keeps these apart.
  return (uint64_t(0xA5) << 56) | (uint64_t(tag) << 24) | (segment & 0xFFFFFF);
}

size_t segments(size_t bytes) { return (bytes + SealedRing::kSegmentBytes - 1) / SealedRing::kSegmentBytes; }

}  // namespace

SealedRing::SealedRing(std::shared_ptr<gloo::Context> context, GroupStore& store, const GroupSpec& spec)
    : context_(std::move(context)), rank_(spec.rank), world_(spec.world_size) {
  uint8_t raw[16];
  if (RAND_bytes(raw, sizeof raw) != 1) throw CollectiveError("group '" + spec.name + "': no randomness for its salt");
  std::string mine = sys::sha256_hex(raw, sizeof raw).substr(0, 32);
  store.set("salt_" + std::to_string(rank_), std::vector<char>(mine.begin(), mine.end()));
  to_.resize(world_);
  from_.resize(world_);
  sent_.assign(world_, 0);
  opened_.assign(world_, 0);
  for (int p = 0; p < world_; ++p) {
    if (p == rank_) continue;
    auto v = store.get("salt_" + std::to_string(p));
    std::string theirs(v.begin(), v.end());
    uint8_t key[32];
    direction_key(spec, rank_, p, mine, theirs, key);
    to_[p] = std::make_unique<LinkCipher>(key, rank_, p);
    direction_key(spec, p, rank_, theirs, mine, key);
    from_[p] = std::make_unique<LinkCipher>(key, p, rank_);
    OPENSSL_cleanse(key, sizeof key);
  }
}

SealedRing::~SealedRing() = default;

std::chrono::milliseconds SealedRing::left(Clock::time_point deadline) const {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(ms, std::chrono::milliseconds(1));
}

void SealedRing::exchange(int to, const void* out, size_t out_bytes, int from, size_t in_bytes, void* in_place,
                          const Take& take, uint32_t tag, Clock::time_point deadline) {
  if (to < 0) out_bytes = 0;
  if (from < 0) in_bytes = 0;
  size_t n_out = segments(out_bytes), n_in = segments(in_bytes);
  in_buf_.resize(in_bytes + n_in * kOverhead);
  out_buf_.resize(out_bytes + n_out * kOverhead);
  // Receives first, so that arriving segments land in place.
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> ins, outs;
  for (size_t i = 0; i < n_in; ++i) {
    size_t len = std::min(kSegmentBytes, in_bytes - i * kSegmentBytes);
    ins.push_back(context_->createUnboundBuffer(in_buf_.data() + i * (kSegmentBytes + kOverhead), len + kOverhead));
    ins.back()->recv(from, slot_of(tag, i));
  }
  for (size_t i = 0; i < n_out; ++i) {
    size_t len = std::min(kSegmentBytes, out_bytes - i * kSegmentBytes);
    uint8_t* sealed = out_buf_.data() + i * (kSegmentBytes + kOverhead);
    to_[to]->seal(++sent_[to], static_cast<const uint8_t*>(out) + i * kSegmentBytes, len, sealed);
    outs.push_back(context_->createUnboundBuffer(sealed, len + kOverhead));
    outs.back()->send(to, slot_of(tag, i));
  }
  for (size_t i = 0; i < n_in; ++i) {
    size_t off = i * kSegmentBytes, len = std::min(kSegmentBytes, in_bytes - off);
    if (!ins[i]->waitRecv(left(deadline)))
      throw CollectiveError("receiving from rank " + std::to_string(from) + " was aborted");
    uint8_t* msg = in_buf_.data() + i * (kSegmentBytes + kOverhead);
    uint8_t* dst = in_place ? static_cast<uint8_t*>(in_place) + off : nullptr;
    uint64_t counter = from_[from]->open(msg, len, dst);
    if (counter <= opened_[from])
      throw CollectiveError("a message from rank " + std::to_string(from) + " was replayed (counter " +
                            std::to_string(counter) + " after " + std::to_string(opened_[from]) + ")");
    opened_[from] = counter;
    if (!in_place) take(off, msg + 8, len);
  }
  for (auto& b : outs)
    if (!b->waitSend(left(deadline)))
      throw CollectiveError("sending to rank " + std::to_string(to) + " was aborted");
}

void SealedRing::allreduce(void* data, size_t count, size_t elem_size, const Reduce& reduce, uint32_t tag,
                           std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  auto* base = static_cast<uint8_t*>(data);
  auto first = [&](int c) { return count * size_t(c) / size_t(world_); };
  auto bytes = [&](int c) { return (first(c + 1) - first(c)) * elem_size; };
  auto at = [&](int c) { return base + first(c) * elem_size; };
  int right = (rank_ + 1) % world_, left_rank = (rank_ + world_ - 1) % world_;
  // Reduce-scatter: after world - 1 steps this rank holds chunk rank + 1 fully reduced.
  for (int s = 0; s < world_ - 1; ++s) {
    int send_c = (rank_ - s + world_) % world_, recv_c = (rank_ - s - 1 + 2 * world_) % world_;
    uint8_t* into = at(recv_c);
    exchange(right, at(send_c), bytes(send_c), left_rank, bytes(recv_c), nullptr,
             [&](size_t off, const uint8_t* plain, size_t len) { reduce(into + off, into + off, plain, len / elem_size); },
             tag, deadline);
  }
  // Allgather of the reduced chunks, opened straight into place.
  for (int s = 0; s < world_ - 1; ++s) {
    int send_c = (rank_ + 1 - s + world_) % world_, recv_c = (rank_ - s + world_) % world_;
    exchange(right, at(send_c), bytes(send_c), left_rank, bytes(recv_c), at(recv_c), nullptr, tag, deadline);
  }
}

void SealedRing::broadcast(void* data, size_t bytes, int root, uint32_t tag, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  if (rank_ == root) {
    for (int p = 0; p < world_; ++p)
      if (p != root) exchange(p, data, bytes, -1, 0, nullptr, nullptr, tag, deadline);
  } else {
    exchange(-1, nullptr, 0, root, bytes, data, nullptr, tag, deadline);
  }
}

void SealedRing::allgather(const void* in, void* out, size_t bytes, uint32_t tag, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  auto* base = static_cast<uint8_t*>(out);
  std::memcpy(base + size_t(rank_) * bytes, in, bytes);
  int right = (rank_ + 1) % world_, left_rank = (rank_ + world_ - 1) % world_;
  for (int s = 0; s < world_ - 1; ++s) {
    int send_b = (rank_ - s + world_) % world_, recv_b = (rank_ - s - 1 + 2 * world_) % world_;
    exchange(right, base + size_t(send_b) * bytes, bytes, left_rank, bytes, base + size_t(recv_b) * bytes, nullptr, tag,
             deadline);
  }
}

void SealedRing::send(const void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout) {
  exchange(peer, data, bytes, -1, 0, nullptr, nullptr, tag, Clock::now() + timeout);
}

void SealedRing::recv(void* data, size_t bytes, int peer, uint32_t tag, std::chrono::milliseconds timeout) {
  exchange(-1, nullptr, 0, peer, bytes, data, nullptr, tag, Clock::now() + timeout);
}

}  // namespace yard::collective
