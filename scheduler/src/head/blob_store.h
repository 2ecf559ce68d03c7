// Content-addressed files of the cluster (job binaries and working directories, uploaded once per
// digest): `HasBlob`, `PutBlob` (the bytes checked against their SHA-256 digest) and `GetBlob`.
// A blob is kept in the control store (store::Blobs), so that it is replicated with the store and
// a head on another machine serves what was uploaded to the one before it; the session's `blobs/`
// keeps a copy of each one this head served. Blobs unused for a day that no running job names are
// dropped (sweep).
#pragma once

#include <set>
#include <string>

#include "common/service.h"
#include "store/tables.h"

namespace yard::sched {

class BlobStore {
 public:
  static constexpr double kKeepS = 24 * 3600;  // how long an unused blob is kept

  BlobStore(std::string dir, store::Blobs& blobs, detail::Messenger& io, std::string token, const Replies& reply)
      : dir_(std::move(dir)), blobs_(blobs), io_(io), token_(std::move(token)), reply_(reply) {}
  // Answers a HasBlob, PutBlob or GetBlob request.
  void handle(Incoming& in);
  // Drops the blobs unused since `now - kKeepS` that `live` (the digests of jobs that still run)
  // does not name; those it names are noted as used.
  void sweep(const std::set<std::string>& live, double now);

 private:
  bool has(const std::string& digest, double now);
  void get(Incoming& in, const std::string& digest, double now);
  std::string path(const std::string& digest) const { return dir_ + "/" + digest; }
  std::string dir_;
  store::Blobs& blobs_;
  detail::Messenger& io_;
  std::string token_;
  const Replies& reply_;
};

}  // namespace yard::sched
