#include "store/format.h"

#include <functional>
#include <vector>

#include "yard/errors.h"
#include "yard/internal/keys.h"
#include "yard/internal/redis.h"

namespace yard::sched::store {

namespace {

constexpr const char* kFormatField = "format";

// Format 1 -> 2: the shared rendezvous keys of every job's groups go (rebuilt by whoever meets
// again, now under their job's keys).
void drop_shared_rendezvous(StoreLink& s) {
  std::string cursor = "0";
  do {
    auto r = s.cmd({"SCAN", cursor, "MATCH", "yard:coll:*", "COUNT", "1000"});
    cursor = r.at(0);
    auto keys = r.nested_strings(1);
    if (keys.empty()) continue;
    std::vector<std::string> del{"DEL"};
    del.insert(del.end(), keys.begin(), keys.end());
    s.cmd(del);
  } while (cursor != "0");
}

// migrations[k] takes a store from format k + 1 to k + 2.
const std::vector<std::function<void(StoreLink&)>>& migrations() {
  static const std::vector<std::function<void(StoreLink&)>> steps{drop_shared_rendezvous};
  return steps;
}

}  // namespace

FormatCheck check_format(const std::string& found, bool has_records, int current) {
  FormatCheck c;
  if (found.empty()) {
    if (!has_records) return c;  // kFresh
    c.action = FormatCheck::Action::kMigrate;
    c.from = 1;
    return c;
  }
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(found, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != found.size() || n < 1) {
    c.action = FormatCheck::Action::kRefuse;
    c.message = "its format is '" + found + "', not a format number: it was not written by Switchyard, or was damaged; "
                "point the head at a fresh Redis (or repair the field `format` of yard:cluster)";
    return c;
  }
  if (n > current) {
    c.action = FormatCheck::Action::kRefuse;
    c.message = "it was written by a newer Switchyard (format " + std::to_string(n) + "; this head reads formats up to " +
                std::to_string(current) + "): start the head of that version, or point this one at a fresh Redis";
    return c;
  }
  c.action = n == current ? FormatCheck::Action::kCurrent : FormatCheck::Action::kMigrate;
  c.from = n;
  return c;
}

std::string settle_format(StoreLink& s, const std::string& where) {
  auto found = s.cmd({"HGET", keys::cluster(), kFormatField});
  bool has_records = s.cmd({"EXISTS", keys::cluster(), keys::jobs(), keys::actors(), keys::nodes()}).integer() > 0;
  auto c = check_format(found.is_nil() ? std::string() : found.str(), has_records);
  if (c.action == FormatCheck::Action::kCurrent) return "";
  if (c.action == FormatCheck::Action::kRefuse) throw Error("the control store at " + where + " cannot be used: " + c.message);
  bool fresh = c.action == FormatCheck::Action::kFresh;
  for (int k = c.from; !fresh && k < kStoreFormat; ++k) migrations().at(static_cast<size_t>(k - 1))(s);
  s.cmd({"HSET", keys::cluster(), kFormatField, std::to_string(kStoreFormat)});
  if (fresh) return "";
  return "the control store at " + where + " was in format " + std::to_string(c.from) + " (" +
         (c.from == 1 ? "written before it kept a format number" : "an older Switchyard's") + "): migrated to format " +
         std::to_string(kStoreFormat);
}

}  // namespace yard::sched::store
