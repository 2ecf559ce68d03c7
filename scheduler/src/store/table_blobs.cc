#include "store/tables.h"

#include "yard/internal/keys.h"
#include "yard/internal/redis.h"

namespace yard::sched::store {

namespace {
std::string at(double t) { return std::to_string(static_cast<long long>(t)); }
}  // namespace

void Blobs::put(const std::string& digest, const std::string& bytes, double now) {
  s_.write({{"SET", keys::blob(digest), bytes}, {"ZADD", keys::blob_uses(), at(now), digest}});
}

bool Blobs::has(const std::string& digest) { return s_.cmd({"EXISTS", keys::blob(digest)}).integer() == 1; }

std::optional<std::string> Blobs::get(const std::string& digest) {
  auto r = s_.cmd({"GET", keys::blob(digest)});
  if (r.is_nil()) return std::nullopt;
  return r.str();
}

void Blobs::touch(const std::vector<std::string>& digests, double now) {
  if (digests.empty()) return;
  std::vector<std::string> cmd{"ZADD", keys::blob_uses()};
  for (auto& d : digests) {
    cmd.push_back(at(now));
    cmd.push_back(d);
  }
  s_.write({cmd});
}

std::vector<std::string> Blobs::unused_since(double before) {
  return s_.cmd({"ZRANGEBYSCORE", keys::blob_uses(), "-inf", "(" + at(before)}).strings();
}

void Blobs::drop(const std::vector<std::string>& digests) {
  if (digests.empty()) return;
  std::vector<std::vector<std::string>> cmds;
  std::vector<std::string> rem{"ZREM", keys::blob_uses()};
  for (auto& d : digests) {
    cmds.push_back({"DEL", keys::blob(d)});
    rem.push_back(d);
  }
  cmds.push_back(rem);
  s_.write(cmds);
}

}  // namespace yard::sched::store
