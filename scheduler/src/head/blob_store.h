// Content-addressed files at the head (job binaries and working directories, uploaded once per
// digest): `HasBlob`, `PutBlob` (the bytes checked against their SHA-256 digest and written
// atomically) and `GetBlob`, kept under the session's `blobs/`.
#pragma once

#include <string>

#include "common/service.h"

namespace yard::sched {

class BlobStore {
 public:
  BlobStore(std::string dir, detail::Messenger& io, std::string token, const Replies& reply)
      : dir_(std::move(dir)), io_(io), token_(std::move(token)), reply_(reply) {}
  // Answers a HasBlob, PutBlob or GetBlob request.
  void handle(Incoming& in);

 private:
  std::string dir_;
  detail::Messenger& io_;
  std::string token_;
  const Replies& reply_;
};

}  // namespace yard::sched
