#include <catch2/catch.hpp>

#include <functional>
#include <memory>

#include "io_loop.h"

using namespace yard::detail;

TEST_CASE("a reply callback runs what it holds, small or large, and frees it once", "[reply-callback]") {
  auto seen = std::make_shared<int>(0);
  SECTION("a small callable, kept inside") {
    ReplyCallback cb = [seen](std::unique_ptr<InMessage> r, std::optional<LocalError> e) {
      *seen += (r ? 1 : 0) + (e ? 10 : 0);
    };
    REQUIRE(bool(cb));
    CHECK(seen.use_count() == 2);
    ReplyCallback moved = std::move(cb);
    CHECK_FALSE(bool(cb));
    CHECK(seen.use_count() == 2);  // moved, not copied
    moved(nullptr, LocalError{yard::wire::ErrorCode::TIMEOUT, "late"});
    CHECK(*seen == 10);
  }
  SECTION("a large callable, kept on the heap") {
    char pad[ReplyCallback::kInline + 16] = {7};
    ReplyCallback cb = [seen, pad](std::unique_ptr<InMessage>, std::optional<LocalError>) { *seen += pad[0]; };
    ReplyCallback moved;
    moved = std::move(cb);
    moved(nullptr, std::nullopt);
    CHECK(*seen == 7);
    CHECK(seen.use_count() == 2);
  }
  SECTION("a std::function") {
    std::function<void(std::unique_ptr<InMessage>, std::optional<LocalError>)> f =
        [seen](std::unique_ptr<InMessage>, std::optional<LocalError>) { *seen += 3; };
    ReplyCallback cb = f;
    cb(nullptr, std::nullopt);
    CHECK(*seen == 3);
    CHECK(seen.use_count() == 3);  // f and cb's copy of it
  }
  CHECK(seen.use_count() == 1);  // every callback freed what it held
  ReplyCallback empty = nullptr;
  CHECK_FALSE(bool(empty));
}
