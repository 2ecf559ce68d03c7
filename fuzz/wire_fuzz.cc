// libFuzzer target: the wire envelope and every request and reply type in it. The input's first
// byte says how many extra frames follow the envelope (0-3, fixed contents); the rest is frame 0.
// InMessage must refuse a bad envelope with DecodeError; a good one is then read whole, every field
// of whatever body it has (through Cap'n Proto's reflection, as a handler reading any field would),
// and every Value in it is resolved as a receiver would (inline bytes, frame references, shared
// memory names, held values). Nothing may crash, hang, read out of bounds or run past the
// traversal limit that bounds the work a message can cause. Seeds are messages the runtime builds.
#include <capnp/dynamic.h>
#include <capnp/schema.h>

#include "fuzz_support.h"
#include "yard/internal/messaging.h"

using namespace yard::detail;
namespace wire = yard::wire;

namespace {

void resolve(const InMessage& m, wire::Value::Reader v) {
  try {
    (void)m.value(v);
  } catch (const DecodeError&) {
  }
}

// Reads every field present, depth first; `budget` bounds the walk of one message.
void walk(const InMessage& m, capnp::DynamicValue::Reader v, int& budget) {
  if (--budget < 0) return;
  switch (v.getType()) {
    case capnp::DynamicValue::STRUCT: {
      auto s = v.as<capnp::DynamicStruct>();
      if (s.getSchema() == capnp::Schema::from<wire::Value>()) resolve(m, s.as<wire::Value>());
      KJ_IF_MAYBE(f, s.which()) { walk(m, s.get(*f), budget); }
      for (auto f : s.getSchema().getNonUnionFields())
        if (s.has(f)) walk(m, s.get(f), budget);
      break;
    }
    case capnp::DynamicValue::LIST:
      for (auto e : v.as<capnp::DynamicList>()) walk(m, e, budget);
      break;
    case capnp::DynamicValue::TEXT:
      (void)v.as<capnp::Text>().size();
      break;
    case capnp::DynamicValue::DATA:
      (void)v.as<capnp::Data>().size();
      break;
    default:
      break;
  }
}

void write(const std::string& dir, const std::string& name, OutMessage& m, int extra) {
  auto frames = m.finish();
  std::string s(1, char(extra));
  s.append(static_cast<const char*>(frames[0].data()), frames[0].size());
  fuzz::write_seed(dir, name, s);
}

void make_seeds(const std::string& dir) {
  const std::string token = "0123456789abcdef";
  {
    OutMessage m(token, 7, false);
    auto pt = m.env().getBody().initPushTask();
    pt.setTaskId("task-1");
    pt.setFunction("add");
    auto args = pt.initArgs(3);
    std::string a = "\x93\x01\x02\x03";
    args[0].setInline(kj::arrayPtr(reinterpret_cast<const kj::byte*>(a.data()), a.size()));
    args[1].setFrame(1);
    auto shm = args[2].initShm();
    shm.setName("/yard-obj-0-1");
    shm.setSize(64);
    write(dir, "push_task", m, 1);
  }
  {
    OutMessage m(token, 8, false);
    auto ca = m.env().getBody().initCreateActor();
    ca.setActorId("actor-1");
    ca.setClassName("Counter");
    ca.setMaxRestarts(-1);
    std::map<std::string, double> res{{"CPU", 1}, {"GPU", 0.5}};
    set_resources(ca.initResources(2), res);
    ca.setPlacementGroup("pg-1");
    ca.setBundleIndex(-1);
    write(dir, "create_actor", m, 0);
  }
  {
    OutMessage m(token, 9, true);
    std::string r = "\x2a";
    m.env().getBody().initTaskReply().initResult().setInline(kj::arrayPtr(reinterpret_cast<const kj::byte*>(r.data()), r.size()));
    write(dir, "task_reply", m, 0);
  }
  {
    OutMessage m(token, 10, true);
    set_error(m.env(), wire::ErrorCode::TASK_ERROR, "boom", "std::runtime_error", "x.cc:1");
    write(dir, "error", m, 0);
  }
  {
    OutMessage m(token, 11, false);
    auto g = m.env().getBody().initGetObjectPart();
    g.setId("obj-1");
    g.setOffset(4 << 20);
    g.setLength(4 << 20);
    write(dir, "get_object_part", m, 0);
  }
  {
    OutMessage m(token, 12, false);
    auto sj = m.env().getBody().initSubmitJob();
    auto ep = sj.initEntrypoint(2);
    ep.set(0, "python3");
    ep.set(1, "train.py");
    sj.initEnv(1).set(0, "A=1");
    write(dir, "submit_job", m, 0);
  }
  {
    OutMessage m(token, 13, false);
    m.env().getBody().setStatus();
    write(dir, "status", m, 0);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::initialize(make_seeds, false); }

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  Frames frames;
  frames.emplace_back(data + 1, size - 1);
  for (int i = 0; i < (data[0] & 3); ++i) frames.emplace_back(std::string(16 * (i + 1), 'f'));
  std::unique_ptr<InMessage> m;
  try {
    m = std::make_unique<InMessage>(std::move(frames));
  } catch (const DecodeError&) {
    return 0;
  }
  try {
    int budget = 100000;
    walk(*m, capnp::toDynamic(m->env()), budget);
    (void)m->same_host();
    m->rewind();
    (void)m->env().getBody().which();
  } catch (const kj::Exception&) {
    // A field that does not read (a bad pointer, the traversal limit): what handlers turn into
    // a BAD_REQUEST answer.
  }
  return 0;
}
