// The node's blob cache: job binaries and working directories fetched from the head by digest
// (no shared file system is assumed) into <session>/blobs, each once however many wait for it,
// checked against its digest; uploaded working directories unpacked once under
// <session>/workdirs.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "yard/internal/messaging.h"
#include "result.h"

namespace yard::sched {

class BlobCache {
 public:
  // References to the node's I/O loop, token, the head's address and its session and log folders.
  BlobCache(detail::Messenger& io, const std::string& token, const std::string& head,
            const std::string& session_dir, const std::string& log_dir)
      : io_(io), token_(token), head_(head), session_dir_(session_dir), log_dir_(log_dir) {}

  std::string path(const std::string& digest) const { return session_dir_ + "/blobs/" + digest; }
  // Fetches the blob into path(digest) unless it is there, then calls k with what failed.
  void fetch(const std::string& digest, std::function<void(const Problem&)> k);
  // Unpacks a working directory (a tar.gz blob already here); the directory, or why not.
  Result<std::string> unpack_workdir(const std::string& digest);

 private:
  detail::Messenger& io_;
  const std::string& token_;
  const std::string& head_;
  const std::string& session_dir_;
  const std::string& log_dir_;
  std::map<std::string, std::vector<std::function<void(const Problem&)>>> fetching_;  // digest -> waiters
};

}  // namespace yard::sched
