#include "store/tables.h"

#include "yard/internal/keys.h"
#include "yard/internal/redis.h"

namespace yard::sched::store {

void Journals::append_timeline(const std::string& job, const std::vector<std::string>& spans) {
  s_.append_capped(keys::timeline(job), spans, 2000);
}
std::vector<std::string> Journals::timeline(const std::string& job) {
  return s_.cmd({"LRANGE", keys::timeline(job), "0", "-1"}).strings();
}
void Journals::append_curves(const std::string& job, const std::vector<std::string>& points) {
  s_.append_capped(keys::curves(job), points, 20000);
}
std::vector<std::string> Journals::curves(const std::string& job) {
  return s_.cmd({"LRANGE", keys::curves(job), "0", "-1"}).strings();
}

void Journals::publish(const std::string& ev) {
  s_.run_all({{"PUBLISH", keys::events(), ev}, {"RPUSH", keys::event_log(), ev}, {"LTRIM", keys::event_log(), "-10000", "-1"}});
}

}  // namespace yard::sched::store
