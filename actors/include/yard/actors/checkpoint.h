// Checkpoints that survive crashes: written atomically, verified on load, the last K kept.
//
// A checkpoint is a step number and named blobs (model, optimizer, LR schedule, data-loader
// position...). write() serialises them to "<dir>/ckpt-<step>.bin.tmp", fsyncs it, renames it to
// "ckpt-<step>.bin", fsyncs the directory, then moves the "latest" pointer (a LATEST file written
// the same way, and then `on_latest`: a Checkpointer records it in the job's checkpoint records), then
// deletes checkpoints beyond the newest K. A crash at any point leaves the previous checkpoint
// whole.
//
// File format (little-endian): char[8] "YRDCKPT1"; u32 version (1); u64 step; u32 entries; per
// entry: u32 name length, name, u64 size, bytes; then u32 CRC-32 of everything before it.
//
// restore() takes the newest checkpoint that verifies, skipping (with a warning in `skipped`)
// truncated, corrupt or half-written ones. write_async() hands a snapshot to a background thread
// so training goes on while it is serialised and written; wait() waits for the writes in flight.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace yard::actors {

struct Checkpoint {
  uint64_t step = 0;
  std::map<std::string, std::string> blobs;
};

// Makes the calling thread a background one: SCHED_BATCH (a thread it wakes is not run ahead of
// the one that woke it) at nice 10. Checkpoint writers call it so that handing them a snapshot
// does not hand them the trainer's core too; on a machine with no spare core they take the
// time left over. Best effort: where the system refuses, the thread keeps its priority.
void make_background_thread();

class CheckpointStore {
 public:
  // `on_latest` (optional) is called with (step, path) after each successful write: where a
  // "latest" record is kept elsewhere (yard::record_checkpoint).
  CheckpointStore(std::string dir, size_t keep = 3,
                  std::function<void(uint64_t, const std::string&)> on_latest = {});
  ~CheckpointStore();

  // Writes now; returns the file path. Throws std::runtime_error (with the path) on I/O errors.
  std::string write(const Checkpoint& c);
  // Takes the snapshot and writes it on the background thread.
  void write_async(Checkpoint c);
  // Calls make() on the background thread, then writes what it returns: the caller hands over a
  // cheap snapshot (e.g. StateSnapshot copies of tensors) and the serialising happens there too.
  // An exception from make() fails that write like an I/O error does.
  void write_async(std::function<Checkpoint()> make);
  // Waits for every write handed over so far; rethrows the first failure.
  void wait();

  // The newest checkpoint that verifies; nullopt when there is none.
  std::optional<Checkpoint> restore();
  // What restore() passed over, and why ("<path>: <reason>").
  const std::vector<std::string>& skipped() const { return skipped_; }
  // Checkpoint files present, newest first.
  std::vector<std::string> list() const;

  // Reads and verifies one file. Throws std::runtime_error saying what is wrong.
  static Checkpoint read_file(const std::string& path);

 private:
  void worker();

  std::string dir_;
  size_t keep_;
  std::function<void(uint64_t, const std::string&)> on_latest_;
  std::vector<std::string> skipped_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<Checkpoint()>> queue_;  // guarded by mu_
  bool busy_ = false, stop_ = false;
  std::string error_;              // guarded by mu_
  std::thread thread_;
};

}  // namespace yard::actors
