// Sealed links: messages sealed with AES-256-GCM, for the bulk of large values between hosts.
//
// CurveZMQ's cipher (XSalsa20-Poly1305 in libsodium) runs at about a third of AES-GCM's speed on
// processors with AES instructions, and on a small host it, not the network, bounds how fast a
// large value crosses an encrypted link. So a process that listens beyond loopback also listens
// on a data link: a plain ZeroMQ connection on which every frame of every message is sealed with
// AES-256-GCM under a key that process made at random when it started. The key is handed out
// only over the encrypted (CURVE) link, in the first part of a large value (wire.capnp DataLink),
// so only a peer that holds the cluster's keys learns it, and a capture of both links reveals
// nothing later, even to someone who learns the cluster token then. A message on the data link
// that does not open with the key is dropped and counted, never answered; the data link answers
// nothing but requests for parts of objects, which read and change nothing.
//
// A sealed frame is [nonce: 12 bytes][frame index: 2][frame count: 2][ciphertext][tag: 16]. The
// nonce is random per message (frame i uses it with i added to its last four bytes); the
// associated data is the direction (request or reply) and the frame's index and count, and every
// frame of one message must carry the same nonce: frames cannot be moved between messages,
// dropped from one, or a request reflected as a reply.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "wire.h"

typedef struct evp_cipher_ctx_st EVP_CIPHER_CTX;

namespace yard::detail {

enum class SealedAs : uint8_t { request = 'Q', reply = 'R' };

class LinkSeal {
 public:
  static constexpr size_t kKeyBytes = 32, kHeaderBytes = 16, kTagBytes = 16;
  // A fresh random key (kKeyBytes).
  static std::string make_key();
  // Throws std::invalid_argument when the key is not kKeyBytes long.
  explicit LinkSeal(const std::string& key);
  ~LinkSeal();
  LinkSeal(const LinkSeal&) = delete;
  LinkSeal& operator=(const LinkSeal&) = delete;

  // Replaces every frame of one message by its sealed form.
  void seal(Frames& frames, SealedAs as);
  // Room a frame may be opened into; `keep` (may be null) holds it while the frame lives.
  struct Room {
    char* data = nullptr;
    std::shared_ptr<const void> keep;
  };
  // Where a frame after the first may be opened to instead of in place: given the first frame's
  // plaintext (opened already), the frame's index and its plaintext size, room for it (or none).
  using Landing = std::function<Room(const char* first, size_t first_size, size_t index, size_t size)>;
  // Opens every frame of one message in place (no copy: each frame becomes a view of the
  // plaintext inside the received one), or where `land` says (the frame becomes a view of that
  // room, holding its `keep`). False, with the frames unusable and anything landed garbage,
  // when any frame is not authentic or they do not belong together.
  bool open(Frames& frames, SealedAs as, const Landing& land = {});

 private:
  EVP_CIPHER_CTX* ctx_;
  unsigned char key_[kKeyBytes];
};

}  // namespace yard::detail
