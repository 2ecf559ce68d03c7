#include "head/blob_store.h"

#include <ctime>
#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;

namespace {

bool valid(const std::string& d) {
  return d.size() == 64 && d.find_first_not_of("0123456789abcdef") == std::string::npos;
}

std::optional<std::string> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

}  // namespace

void BlobStore::handle(Incoming& in) {
  auto body = in.msg->env().getBody();
  double now = static_cast<double>(time(nullptr));
  if (body.isHasBlob()) {
    std::string d = body.getHasBlob();
    if (valid(d) && has(d, now)) return reply_.ok(in);
    return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no blob " + d);
  }
  if (body.isPutBlob()) {
    std::string d = body.getPutBlob().getDigest();
    auto bytes = in.msg->value(body.getPutBlob().getData());
    if (!valid(d) || sha256_hex(bytes->data(), bytes->size()) != d)
      return reply_.error(in, wire::ErrorCode::BAD_REQUEST, "the blob's bytes do not match its digest");
    blobs_.put(d, std::string(bytes->data(), bytes->size()), now);
    if (auto why = write_file_atomic(path(d), bytes->data(), bytes->size()))
      spdlog::warn("blob {}: no copy in {}: {}", d, dir_, *why);  // the control store has it
    spdlog::info("stored blob {} ({} bytes)", d, bytes->size());
    return reply_.ok(in);
  }
  std::string d = body.getGetBlob();
  if (!valid(d)) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no blob " + d);
  get(in, d, now);
}

// In the control store; a copy only this head has (uploaded before blobs were kept there) is put
// there first.
bool BlobStore::has(const std::string& d, double now) {
  if (!blobs_.has(d)) {
    auto bytes = read_file(path(d));
    if (!bytes) return false;
    blobs_.put(d, *bytes, now);
    return true;
  }
  blobs_.touch({d}, now);
  return true;
}

void BlobStore::get(Incoming& in, const std::string& d, double now) {
  auto data = read_file(path(d));
  if (data) {
    blobs_.touch({d}, now);
  } else if ((data = blobs_.get(d))) {
    blobs_.touch({d}, now);
    if (auto why = write_file_atomic(path(d), data->data(), data->size()))
      spdlog::warn("blob {}: no copy in {}: {}", d, dir_, *why);
  } else {
    return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no blob " + d);
  }
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.set_value(m.env().getBody().initTaskReply().initResult(), std::make_shared<StringBuffer>(std::move(*data)));
  io_.reply(in.routing_id, m.finish());
}

void BlobStore::sweep(const std::set<std::string>& live, double now) {
  std::vector<std::string> drop, keep;
  for (auto& d : blobs_.unused_since(now - kKeepS)) (live.count(d) ? keep : drop).push_back(d);
  blobs_.touch(keep, now);
  blobs_.drop(drop);
  std::error_code ec;
  for (auto& d : drop) fs::remove(path(d), ec);
  if (!drop.empty()) spdlog::info("dropped {} blob(s) unused for {} h", drop.size(), kKeepS / 3600);
}

}  // namespace yard::sched
