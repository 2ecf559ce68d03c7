#include <catch2/catch.hpp>

#include <random>

#include "wire.h"

using namespace yard::detail;

namespace {
Frames copy_frames(Frames& f) {
  Frames out;
  for (auto& m : f) {
    zmq::message_t c;
    c.copy(m);
    out.push_back(std::move(c));
  }
  return out;
}
}  // namespace

TEST_CASE("an envelope round-trips with inline and out-of-band values", "[wire]") {
  OutMessage m("tok", 7, false);
  auto pt = m.env().getBody().initPushTask();
  pt.setFunction("f");
  auto args = pt.initArgs(2);
  std::string small(10, 'a'), large(kLargeValueBytes + 1, 'b');
  m.set_value(args[0], std::make_shared<StringBuffer>(small));
  m.set_value(args[1], std::make_shared<StringBuffer>(large));
  auto frames = m.finish();
  REQUIRE(frames.size() == 2);  // the large value travels as its own frame
  InMessage in(std::move(frames));
  CHECK(std::string(in.env().getToken()) == "tok");
  CHECK(in.env().getRequestId() == 7);
  auto rargs = in.env().getBody().getPushTask().getArgs();
  CHECK(rargs[0].isInline());
  CHECK(rargs[1].isFrame());
  auto a0 = in.value(rargs[0]);
  auto a1 = in.value(rargs[1]);
  CHECK(std::string(a0->data(), a0->size()) == small);
  CHECK(std::string(a1->data(), a1->size()) == large);
}

TEST_CASE("malformed, truncated and random bytes raise DecodeError, never crash", "[wire]") {
  OutMessage m("tok", 1, false);
  m.env().getBody().initSubmitJob().initEntrypoint(3).set(0, "prog");
  auto good = m.finish();
  std::string bytes(static_cast<const char*>(good[0].data()), good[0].size());

  SECTION("empty") { CHECK_THROWS_AS(InMessage(Frames{}), DecodeError); }
  SECTION("truncated at every length") {
    for (size_t n = 0; n < bytes.size(); ++n) {
      Frames f;
      f.emplace_back(bytes.data(), n);
      try {
        InMessage in(std::move(f));
        (void)in.env().getBody().which();
      } catch (const DecodeError&) {
      }
    }
    SUCCEED("no crash");
  }
  SECTION("random bytes") {
    std::mt19937 rng(1234);
    int rejected = 0;
    for (int i = 0; i < 2000; ++i) {
      std::string r(8 * (1 + rng() % 16), '\0');
      for (auto& c : r) c = static_cast<char>(rng());
      Frames f;
      f.emplace_back(r.data(), r.size());
      try {
        InMessage in(std::move(f));
        (void)in.env().getBody().which();
      } catch (const DecodeError&) {
        ++rejected;
      }
    }
    CHECK(rejected > 1900);
  }
  SECTION("a value pointing at a missing frame") {
    OutMessage m2("tok", 1, false);
    auto args = m2.env().getBody().initPushTask().initArgs(1);
    args[0].setFrame(5);
    InMessage in(m2.finish());
    CHECK_THROWS_AS(in.value(in.env().getBody().getPushTask().getArgs()[0]), DecodeError);
  }
  SECTION("wrong protocol version") {
    OutMessage m3("tok", 1, false);
    m3.env().setVersion(99);
    CHECK_THROWS_WITH(InMessage(m3.finish()), Catch::Contains("protocol version 99"));
  }
  (void)copy_frames;
}

TEST_CASE("a kept message read many times renews its reading budget with rewind()", "[wire]") {
  OutMessage m("tok", 1, false);
  auto ca = m.env().getBody().initCreateActor();
  ca.setClassName(std::string(4000, 'c'));
  InMessage in(m.finish());
  auto read = [&] { return std::string(in.env().getBody().getCreateActor().getClassName()).size(); };
  // Without renewal the traversal limit (a few times the message) runs out.
  bool ran_out = false;
  for (int i = 0; i < 20 && !ran_out; ++i) {
    try {
      size_t n = read();
      CHECK(n == 4000);
    } catch (const kj::Exception&) {
      ran_out = true;
    }
  }
  CHECK(ran_out);
  // With it, any number of readings.
  for (int i = 0; i < 100; ++i) {
    in.rewind();
    size_t n = read();
    REQUIRE(n == 4000);
  }
}

TEST_CASE("a batch carries several envelopes in order; a malformed batch raises DecodeError", "[wire][batch]") {
  std::vector<Frames> msgs;
  for (uint64_t i = 1; i <= 5; ++i) {
    OutMessage m("tok", i, false);
    m.env().getBody().setPing();
    msgs.push_back(m.finish());
  }
  auto batch = pack_batch(msgs, 1, 4);
  REQUIRE(is_batch(batch));
  CHECK_FALSE(is_batch(msgs[0][0]));  // an envelope is never taken for a batch
  auto out = unpack_batch(batch);
  REQUIRE(out.size() == 3);
  for (size_t i = 0; i < out.size(); ++i) CHECK(InMessage(std::move(out[i])).env().getRequestId() == i + 2);
  // Read in place: the same envelopes, each read once into its own message.
  Frames received;
  received.push_back(pack_batch(msgs, 1, 4));
  auto in_place = received_of(received);
  REQUIRE(in_place.size() == 3);
  for (size_t i = 0; i < in_place.size(); ++i) {
    CHECK(in_place[i].frames.empty());
    auto m = std::move(in_place[i]).open();
    CHECK(m->env().getRequestId() == i + 2);
    CHECK(m->token() == "tok");
  }
  Frames alone = std::move(msgs[4]);  // a message that came alone is taken whole
  auto one = received_of(alone);
  REQUIRE(one.size() == 1);
  CHECK(std::move(one[0]).open()->env().getRequestId() == 5);

  std::string whole(static_cast<const char*>(batch.data()), batch.size());
  auto frame = [](const std::string& s) { return zmq::message_t(s.data(), s.size()); };
  auto with_length = [&](uint64_t n) {
    std::string s = whole.substr(0, 8);
    s.append(reinterpret_cast<const char*>(&n), 8);
    return s + whole.substr(16);
  };
  CHECK_THROWS_AS(unpack_batch(frame(whole.substr(0, 8))), DecodeError);        // empty
  CHECK_THROWS_AS(unpack_batch(frame(whole.substr(0, 12))), DecodeError);       // cut in a length
  CHECK_THROWS_AS(unpack_batch(frame(whole.substr(0, whole.size() - 8))), DecodeError);  // cut in a message
  CHECK_THROWS_AS(unpack_batch(frame(with_length(0))), DecodeError);
  CHECK_THROWS_AS(unpack_batch(frame(with_length(13))), DecodeError);           // not whole words
  CHECK_THROWS_AS(unpack_batch(frame(with_length(uint64_t(1) << 62))), DecodeError);
  CHECK_THROWS_AS(unpack_batch(frame(with_length(~uint64_t(0) - 7))), DecodeError);
  for (auto bad : {whole.substr(0, 8), whole.substr(0, 12), with_length(13)}) {
    Frames f;
    f.push_back(frame(bad));
    CHECK_THROWS_AS(received_of(f), DecodeError);
  }
  // A batched message whose length is not whole words cannot be opened either.
  CHECK_THROWS_AS(InMessage(whole.data() + 16, 12), DecodeError);
  // Random bytes after the magic never crash: they decode to messages or raise DecodeError.
  std::mt19937 rng(3);
  for (int i = 0; i < 2000; ++i) {
    std::string s = whole.substr(0, 8);
    size_t n = rng() % 96;
    for (size_t k = 0; k < n; ++k) s.push_back(static_cast<char>(rng() % 4 == 0 ? rng() : 0));
    try {
      for (auto& m : unpack_batch(frame(s))) {
        try {
          InMessage in(std::move(m));
        } catch (const DecodeError&) {
        }
      }
    } catch (const DecodeError&) {
    }
  }
}

TEST_CASE("a batched message is read from its own copy, small or large, after the batch is gone", "[wire][batch]") {
  std::vector<Frames> msgs;
  for (size_t size : {8, 3000}) {  // one that fits the message's own room, one that does not
    OutMessage m("tok", size, false);
    auto args = m.env().getBody().initPushTask().initArgs(1);
    m.set_value(args[0], std::make_shared<StringBuffer>(std::string(size, 'x')));
    msgs.push_back(m.finish());
  }
  std::vector<std::unique_ptr<InMessage>> opened;
  {
    Frames received;
    received.push_back(pack_batch(msgs, 0, 2));
    for (auto& r : received_of(received)) opened.push_back(std::move(r).open());
  }  // the batch's frame is freed here
  REQUIRE(opened.size() == 2);
  size_t sizes[] = {8, 3000};
  for (size_t i = 0; i < 2; ++i) {
    CHECK(opened[i]->env().getRequestId() == sizes[i]);
    auto b = opened[i]->value(opened[i]->env().getBody().getPushTask().getArgs()[0]);
    CHECK(std::string(b->data(), b->size()) == std::string(sizes[i], 'x'));
  }
}

TEST_CASE("a BatchWriter writes messages straight into one batch, up to its cap, a lone one as itself",
          "[wire][batch]") {
  auto ping = [](uint64_t id) {
    auto m = std::make_unique<OutMessage>("tok", id, false);
    m->env().getBody().setPing();
    return m;
  };
  size_t one = ping(0)->flat_bytes();
  BatchWriter w(8 + 3 * (8 + one));  // room for three
  CHECK(w.empty());
  for (uint64_t i = 1; i <= 3; ++i) REQUIRE(w.add(*ping(i)));
  CHECK(w.count() == 3);
  CHECK_FALSE(w.add(*ping(4)));  // over the cap: nothing written
  CHECK(w.count() == 3);
  Frames got;
  got.push_back(w.take());
  CHECK(w.empty());
  REQUIRE(is_batch(got[0]));
  CHECK(got[0].size() == 8 + 3 * (8 + one));
  auto msgs = received_of(got);
  REQUIRE(msgs.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    auto m = std::move(msgs[i]).open();
    CHECK(m->env().getRequestId() == i + 1);
    CHECK(m->token() == "tok");
    CHECK(m->env().getBody().isPing());
  }
  // The same bytes as finish() and pack_batch give.
  std::vector<Frames> finished;
  for (uint64_t i = 1; i <= 3; ++i) finished.push_back(ping(i)->finish());
  auto packed = pack_batch(finished, 0, 3);
  for (uint64_t i = 1; i <= 3; ++i) REQUIRE(w.add(*ping(i)));
  auto again = w.take();
  CHECK(std::string(static_cast<const char*>(again.data()), again.size()) ==
        std::string(static_cast<const char*>(packed.data()), packed.size()));
  // A lone message leaves as itself, not as a batch of one; the writer goes on after it.
  REQUIRE(w.add(*ping(9)));
  Frames lone;
  lone.push_back(w.take());
  CHECK_FALSE(is_batch(lone[0]));
  CHECK(InMessage(std::move(lone)).env().getRequestId() == 9);
  REQUIRE(w.add(*ping(10)));
  REQUIRE(w.add(*ping(11)));
  CHECK(w.count() == 2);
  // A message larger than the cap never fits.
  OutMessage big("tok", 12, false);
  auto args = big.env().getBody().initPushTask().initArgs(1);
  big.set_value(args[0], std::make_shared<StringBuffer>(std::string(4096, 'x')));
  BatchWriter small(1024);
  CHECK_FALSE(small.add(big));
  CHECK(small.empty());
}

TEST_CASE("a group of replies travels as one message and each reply is read as if it came alone, after the group is "
          "dropped",
          "[wire][batch]") {
  ReplyGroup g("tok");
  CHECK(g.empty());
  std::string value(300, 'v');
  g.add(11).getBody().initTaskReply().initResult().setInline(
      kj::arrayPtr(reinterpret_cast<const kj::byte*>(value.data()), value.size()));
  set_error(g.add(12), yard::wire::ErrorCode::TASK_ERROR, "it threw", "std::runtime_error", "A::f");
  g.add(13).getBody().setOk();
  CHECK(g.count() == 3);
  CHECK(g.bytes() > value.size());
  Frames frames;
  frames.push_back(g.take());
  CHECK(g.empty());
  std::vector<std::unique_ptr<InMessage>> replies;
  {
    auto group = std::make_shared<InMessage>(std::move(frames));
    CHECK(group->token() == "tok");
    CHECK(group->env().getIsReply());
    auto list = group->env().getBody().getTaskReplies();
    REQUIRE(list.size() == 3);
    for (auto r : list) replies.push_back(std::make_unique<InMessage>(group, r.getEnvelope()));
  }
  // Each keeps the group's bytes, and reads the group's token and host.
  CHECK(replies[0]->env().getRequestId() == 11);
  CHECK(replies[0]->token() == "tok");
  CHECK(replies[0]->same_host());
  auto v = replies[0]->value(replies[0]->env().getBody().getTaskReply().getResult());
  CHECK(std::string(v->data(), v->size()) == value);
  CHECK(replies[1]->env().getRequestId() == 12);
  CHECK(describe(replies[1]->env().getBody().getError()) == "task error: it threw");
  CHECK(replies[2]->env().getBody().isOk());
  // A value said to ride in a frame beside it is refused: a group has none.
  ReplyGroup g2("tok");
  g2.add(5).getBody().initTaskReply().initResult().setFrame(1);
  Frames f2;
  f2.push_back(g2.take());
  auto group2 = std::make_shared<InMessage>(std::move(f2));
  InMessage r(group2, group2->env().getBody().getTaskReplies()[0].getEnvelope());
  CHECK_THROWS_AS(r.value(r.env().getBody().getTaskReply().getResult()), DecodeError);
}

TEST_CASE("states travel as enums: each of the C++ enum's values and back, and a newer peer's as none", "[wire]") {
  using namespace yard;
  for (auto s : {states::ActorState::kPending, states::ActorState::kAlive, states::ActorState::kRestarting,
                 states::ActorState::kDead}) {
    CHECK(detail::from_wire(detail::to_wire(s)) == s);
    CHECK(states::parse_actor_state(states::name(s)) == s);
  }
  for (auto s : {states::GroupState::kPending, states::GroupState::kCreated, states::GroupState::kRescheduling,
                 states::GroupState::kRemoved}) {
    CHECK(detail::from_wire(detail::to_wire(s)) == s);
    CHECK(states::parse_group_state(states::name(s)) == s);
  }
  CHECK(detail::to_wire(states::ActorState::kDead) == wire::ActorState::DEAD);
  CHECK(detail::to_wire(states::GroupState::kCreated) == wire::GroupState::CREATED);
  CHECK_FALSE(detail::from_wire(static_cast<wire::ActorState>(9)).has_value());
  CHECK_FALSE(detail::from_wire(static_cast<wire::GroupState>(9)).has_value());
  // Through a message: a reply's actor state is read as it was written.
  detail::OutMessage m("tok", 7, true);
  auto info = m.env().getBody().initActorInfo();
  info.setState(detail::to_wire(states::ActorState::kRestarting));
  auto frames = m.finish();
  detail::InMessage in(std::move(frames));
  CHECK(detail::from_wire(in.env().getBody().getActorInfo().getState()) == states::ActorState::kRestarting);
  CHECK_FALSE(states::parse_node_state("alive").has_value());  // names are exact
}
