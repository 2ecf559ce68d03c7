#include "head/blob_store.h"

#include <filesystem>
#include <fstream>

#include <spdlog/spdlog.h>

#include "yard/process.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;

void BlobStore::handle(Incoming& in) {
  auto body = in.msg->env().getBody();
  auto valid = [](const std::string& d) {
    return d.size() == 64 && d.find_first_not_of("0123456789abcdef") == std::string::npos;
  };
  if (body.isHasBlob()) {
    std::string d = body.getHasBlob();
    if (valid(d) && fs::exists(dir_ + "/" + d)) return reply_.ok(in);
    return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no blob " + d);
  }
  if (body.isPutBlob()) {
    std::string d = body.getPutBlob().getDigest();
    auto bytes = in.msg->value(body.getPutBlob().getData());
    if (!valid(d) || sha256_hex(bytes->data(), bytes->size()) != d)
      return reply_.error(in, wire::ErrorCode::BAD_REQUEST, "the blob's bytes do not match its digest");
    if (auto why = write_file_atomic(dir_ + "/" + d, bytes->data(), bytes->size()))
      return reply_.error(in, wire::ErrorCode::INTERNAL, "cannot store blob: " + *why);
    spdlog::info("stored blob {} ({} bytes)", d, bytes->size());
    return reply_.ok(in);
  }
  std::string d = body.getGetBlob();
  std::ifstream f(dir_ + "/" + d, std::ios::binary);
  if (!valid(d) || !f) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no blob " + d);
  std::string data((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.set_value(m.env().getBody().initTaskReply().initResult(), std::make_shared<StringBuffer>(std::move(data)));
  io_.reply(in.routing_id, m.finish());
}

}  // namespace yard::sched
