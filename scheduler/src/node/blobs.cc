#include "node/blob_cache.h"

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include <spdlog/spdlog.h>

#include "common/service.h"
#include "yard/process.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;

void BlobCache::fetch(const std::string& digest, std::function<void(const Problem&)> k) {
  std::string path = this->path(digest);
  if (access(path.c_str(), R_OK) == 0) return k(std::nullopt);
  auto& waiters = fetching_[digest];
  waiters.push_back(std::move(k));
  if (waiters.size() > 1) return;  // already on its way
  uint64_t rid = io_.next_request_id();
  OutMessage m(token_, rid, false);
  m.env().getBody().setGetBlob(digest);
  spdlog::info("fetching {} from the head", digest);
  io_.request(head_, rid, m.finish(),
               [this, digest, path](std::unique_ptr<InMessage> r, std::optional<LocalError> err) {
                 Problem why;
                 if (err) why = err->message;
                 else if (r->env().getBody().isError()) why = describe(r->env().getBody().getError());
                 else if (!r->env().getBody().isTaskReply()) why = "unexpected reply";
                 if (!why) {
                   auto bytes = r->value(r->env().getBody().getTaskReply().getResult());
                   if (sha256_hex(bytes->data(), bytes->size()) != digest) {
                     why = "the bytes do not match digest " + digest;
                   } else {
                     why = write_file_atomic(path, bytes->data(), bytes->size());
                   }
                 }
                 if (why) spdlog::error("fetching {}: {}", digest, *why);
                 auto ws = std::move(fetching_[digest]);
                 fetching_.erase(digest);
                 for (auto& w : ws) w(why);
               },
               std::chrono::seconds(120));
}

Result<std::string> BlobCache::unpack_workdir(const std::string& digest) {
  using R = Result<std::string>;
  std::string archive = path(digest);
  std::string dir = session_dir_ + "/workdirs/" + digest;
  if (fs::is_directory(dir)) return R::ok(dir);
  if (access(archive.c_str(), R_OK) != 0) return R::fail("no uploaded archive " + digest);
  std::error_code ec;
  std::string tmp = dir + ".tmp" + random_hex(3);
  fs::create_directories(tmp, ec);
  SpawnOptions so;
  so.stdout_path = log_dir_ + "/unpack.log";
  pid_t pid = spawn({which("tar"), "-xzf", archive, "-C", tmp, "--no-same-owner"}, so);
  int st = 0;
  waitpid(pid, &st, 0);
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    fs::remove_all(tmp, ec);
    return R::fail("cannot unpack " + archive + " (see " + log_dir_ + "/unpack.log)");
  }
  fs::rename(tmp, dir, ec);
  if (ec && !fs::is_directory(dir)) return R::fail("cannot create " + dir + ": " + ec.message());
  spdlog::info("unpacked working directory {} into {}", digest, dir);
  return R::ok(dir);
}


}  // namespace yard::sched
