// Team credentials: what a team gives with `yard submit --team T` to be queued as T. Derived from
// the head session's team key (<session>/team.key, mode 0600, made with the session and kept
// across takeovers), not from the cluster token that every submitter holds: a team that has the
// token still cannot claim another team's quota or priority.
#pragma once

#include <string>

namespace yard::sched {

// HMAC-SHA256 of the team's name under the key, as hex.
std::string team_credential(const std::string& team_key, const std::string& team);
// Whether `given` is the team's credential (compared in constant time).
bool credential_matches(const std::string& team_key, const std::string& team, const std::string& given);
// Where a head session keeps its team key.
std::string team_key_file(const std::string& session_dir);
// The session's team key: read, or made (mode 0600) when the session has none yet.
std::string session_team_key(const std::string& session_dir);
// A team key given in a file (`yard start --head --team-key FILE`): its first line, which must be
// at least 32 characters; throws Error saying what is wrong.
std::string given_team_key(const std::string& file);

}  // namespace yard::sched
