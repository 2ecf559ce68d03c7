// Ownership and borrowing of objects, and completing objects from replies.
//
// The process that creates an object owns it. A ref that leaves the process (inside a value) is
// exported: the owner pins the object until the borrower says it dropped the ref. A borrower
// fetches the value from the owner on first use (in parts from another host: object_fetch.h); if
// the owner is gone the get fails with a message naming the object and the owner, never a hang. A large object from another host is fetched once per
// host: the first process to fetch it serves the others there (local_copies.h).
//
// Thread-safety: every method may be called from any thread; requests go out through the I/O
// loop (which may not exist yet in a worker before it serves, or any more after disconnect).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "messenger.h"
#include "objects/memory_store.h"
#include "objects/object_fetch.h"
#include "yard/yard.h"

namespace yard::detail {

// An object's entry completed from a reply: its value, the remote error, or a protocol error.
void complete_from_reply(MemoryStore& store, const std::string& id, const InMessage& reply);
// An object's entry completed with an error of ours (code: wire::ErrorCode).
void fail_object(MemoryStore& store, const std::string& id, wire::ErrorCode code, const std::string& message);
// An object's entry completed with the error a peer replied with.
void fail_from_reply(MemoryStore& store, const std::string& id, wire::Error::Reader e);
// A wire error as the runtime keeps it, and the one place a wire error becomes an exception.
ErrorInfo error_info(wire::Error::Reader e);
[[noreturn]] void throw_reply_error(wire::Error::Reader e);

class Ownership {
 public:
  Ownership(MemoryStore& store, Messenger& io, std::string token)
      : store_(store), io_(io), token_(std::move(token)) {}

  // A ref leaving this process: (id, owner address). An owned object is pinned for the borrower.
  std::pair<std::string, std::string> export_ref(const Holder& h);
  // A ref arriving in a value. One of ours coming back consumes its export.
  Holder import_ref(const std::string& id, const std::string& owner);
  // A holder went: the local entry, and for a borrowed object the borrow at its owner.
  void release(const std::string& id, const std::string& owner);
  // A borrowed object's value is fetched from its owner, once.
  void ensure_fetched(const std::string& id);
  // Completes a call's result from its reply; a result held by its worker on another host
  // (HeldValue) is fetched from there in parts first, then released there.
  void complete(const std::string& id, const InMessage& reply);
  // A worker's large result for a caller on another host: kept under `id` until the caller has
  // fetched and released it. Sets `v` to refer to it.
  void hold(const std::string& id, const Bytes& value, wire::Value::Builder v);
  // Answers a borrower's getObjectPart or releaseObject; false when `in` is neither.
  bool serve(Incoming& in);

 private:
  MemoryStore& store_;
  Messenger& io_;
  const std::string token_;

  struct Borrow {
    std::string owner;
    bool fetching = false;
    bool announced = false;  // this process serves it to the others of its host
    int holders = 0;
  };
  // Asks `from` (a process of this host that holds it, or the owner) for the object.
  void fetch(const std::string& id, const std::string& owner, const std::string& from);
  void fetched(const std::string& id, const std::string& owner, const std::string& from, const FetchResult& r);
  void record_transfer(const std::string& id, const std::string& from, int64_t t0, bool ok, uint64_t bytes);
  void send_release(const std::string& id, const std::string& holder);
  std::mutex mu_;
  // Objects that left this process, kept for their borrowers (id -> holder, count of exports).
  std::unordered_map<std::string, std::pair<Holder, int>> exported_;  // guarded by mu_
  std::unordered_map<std::string, Borrow> borrowed_;                  // guarded by mu_
};

}  // namespace yard::detail
