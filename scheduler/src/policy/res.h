// Resource amounts (CPU, GPU, memory, custom names) and the arithmetic the policies use. Pure:
// no I/O.
#pragma once

#include <map>
#include <string>

namespace yard::sched {

using Res = std::map<std::string, double>;

// Whether `have` holds every positive amount of `need` (within 1e-9).
bool fits(const Res& need, const Res& have);
// The busiest resource's used fraction (0 idle, 1 full), over resources the node has ("memory"
// is left out: it is rarely what fills a node).
double utilisation(const Res& total, const Res& avail);
void add(Res& to, const Res& r);
void sub(Res& from, const Res& r);
// "CPU: 1, GPU: 0.5", or "nothing".
std::string res_text(const Res& r);

}  // namespace yard::sched
