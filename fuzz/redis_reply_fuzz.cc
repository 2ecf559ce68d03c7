// libFuzzer target: replies from a Redis server (or from whatever answers on its port), parsed as
// the control store's client parses them (hiredis' reader) and read through RedisReply the way the
// runtime reads them: as a string, an integer, an array, nested arrays, an error, whatever type
// the reply really has. Nothing may crash or read out of bounds; a reply of the wrong type reads
// as empty or zero, a string read as an integer that is not one throws yard::Error. Seeds are replies of the commands the runtime sends.
#include <hiredis/hiredis.h>

#include "fuzz_support.h"
#include "yard/errors.h"
#include "yard/internal/redis.h"

static void make_seeds(const std::string& dir) {
  fuzz::write_seed(dir, "ok", "+OK\r\n");
  fuzz::write_seed(dir, "bulk", "$5\r\nhello\r\n");
  fuzz::write_seed(dir, "nil", "$-1\r\n");
  fuzz::write_seed(dir, "int", ":1042\r\n");
  fuzz::write_seed(dir, "error", "-NOAUTH Authentication required.\r\n");
  fuzz::write_seed(dir, "hgetall", "*4\r\n$5\r\nstate\r\n$5\r\nALIVE\r\n$7\r\naddress\r\n$14\r\n127.0.0.1:4100\r\n");
  fuzz::write_seed(dir, "scan", "*2\r\n$1\r\n0\r\n*2\r\n$14\r\nyard:node:n-01\r\n$14\r\nyard:node:n-02\r\n");
  fuzz::write_seed(dir, "pipeline", "+OK\r\n:1\r\n*0\r\n$-1\r\n");
}

extern "C" int LLVMFuzzerInitialize(int*, char***) { return fuzz::initialize(make_seeds, false); }

namespace {
// Whether an array header declares more elements than the input could hold. hiredis 0.14 (Debian
// 12's) callocs an array's element table when it reads the header, before any element arrives:
// "*520222020\r\n" asks for 4 GB. calloc of that much is mapped lazily (no memory is touched, or
// the allocation fails and hiredis reports it), so it costs address space only, and hiredis 1.0
// bounds it (maxelements); but libFuzzer counts it as out of memory. Such inputs are skipped.
bool declares_huge_array(const uint8_t* data, size_t size) {
  for (size_t i = 0; i < size; ++i) {
    if (data[i] != '*') continue;  // (hiredis ends a line at any \r: look at every '*')
    uint64_t n = 0;
    for (size_t k = i + 1; k < size && data[k] >= '0' && data[k] <= '9' && n <= size; ++k) n = n * 10 + (data[k] - '0');
    if (n > size) return true;
  }
  return false;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (declares_huge_array(data, size)) return 0;
  redisReader* reader = redisReaderCreate();
  if (!reader) return 0;
  if (redisReaderFeed(reader, reinterpret_cast<const char*>(data), size) == REDIS_OK) {
    for (int i = 0; i < 64; ++i) {
      void* raw = nullptr;
      if (redisReaderGetReply(reader, &raw) != REDIS_OK || !raw) break;
      yard::sys::RedisReply r(static_cast<redisReply*>(raw));
      (void)r.is_nil();
      (void)r.error();
      (void)r.str();
      try {
        (void)r.integer();
      } catch (const yard::Error&) {  // a string that is not a number: said so, not crashed on
      }
      size_t n = r.size();
      for (size_t k = 0; k < n && k < 16; ++k) {
        (void)r.at(k);
        (void)r.nested_strings(k);
      }
      (void)r.at(n);
      (void)r.nested_strings(n + 1);
      (void)r.strings();
    }
  }
  redisReaderFree(reader);
  return 0;
}
