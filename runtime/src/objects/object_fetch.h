// Fetching an object's value from the process that holds it (its owner, or the copy of this host).
//
// The asker sends getObjectPart for the first part. A holder on the same host answers with the
// whole value at once (through shared memory); one on another host answers with a part and the
// value's size. A value larger than one part then comes in parts of kObjectPartBytes, up to
// kPartsInFlight requests outstanding, each written into place in a buffer of the whole size
// (in this process's shared-memory pool when large, so that the host's other processes read it
// from there). A holder that listens beyond loopback names its data link in the first part, and
// the rest are asked for there, sealed with AES-GCM (sealed_link.h) instead of CurveZMQ's cipher. Calls to the same peer are never queued behind more than the parts in flight.
//
// The holder's side is answer_object_part: the part of a value a request asks for.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "messenger.h"
#include "objects/memory_store.h"

namespace yard::detail {

inline constexpr uint64_t kObjectPartBytes = 4u << 20;
inline constexpr int kPartsInFlight = 6;
// The first part of a value that then comes over the holder's data link.
inline constexpr uint64_t kFirstPartBytes = 256u << 10;
// Connections a transfer over an encrypted link is spread over.
inline constexpr int kEncryptedLanes = 2;
// A task's result this large, for a caller on another host, is held by its worker and fetched.
inline constexpr uint64_t kHoldResultBytes = 2 * kObjectPartBytes;

struct FetchResult {
  Bytes value;                      // the whole value, when it arrived
  std::optional<ErrorInfo> error;   // what the holder answered instead (freed, failed)
  std::optional<LocalError> lost;   // the holder could not be reached, or went away mid-way
  bool same_host = false;           // the holder is on this host
};

// Asks `from` for object `id`; `done` runs once, on the I/O loop's thread.
void fetch_object(Messenger& io, const std::string& token, const std::string& id, const std::string& from,
                  std::function<void(FetchResult)> done);

// The reply to a getObjectPart request, given the value (the caller answers for a missing or
// failed object itself). Sets the reply's body. `offer`: the holder's data link, named in the
// first part of a value that comes in several (give it only to a request over an encrypted link).
void answer_object_part(OutMessage& m, wire::ObjectPartRequest::Reader req, const Bytes& value,
                        const DataLink* offer = nullptr);

}  // namespace yard::detail
