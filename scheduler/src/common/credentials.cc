#include "common/credentials.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <filesystem>

#include "yard/internal/session.h"
#include "yard/errors.h"

namespace yard::sched {

std::string team_credential(const std::string& team_key, const std::string& team) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned len = 0;
  std::string msg = "yard team " + team;
  if (!HMAC(EVP_sha256(), team_key.data(), static_cast<int>(team_key.size()),
            reinterpret_cast<const unsigned char*>(msg.data()), msg.size(), mac, &len))
    throw Error("cannot compute a team credential (HMAC-SHA256 failed)");
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += hex[mac[i] >> 4];
    out += hex[mac[i] & 15];
  }
  return out;
}

bool credential_matches(const std::string& team_key, const std::string& team, const std::string& given) {
  std::string want = team_credential(team_key, team);
  return given.size() == want.size() && CRYPTO_memcmp(given.data(), want.data(), want.size()) == 0;
}

std::string team_key_file(const std::string& session_dir) { return session_dir + "/team.key"; }

std::string session_team_key(const std::string& session_dir) {
  std::string f = team_key_file(session_dir);
  if (std::filesystem::exists(f)) return detail::read_token(f);
  return detail::create_token(f);
}

std::string given_team_key(const std::string& file) {
  std::string key;
  try {
    key = detail::read_token(file);
  } catch (const std::exception&) {
    throw Error("--team-key " + file + ": cannot read the file");
  }
  if (key.size() < 32)
    throw Error("--team-key " + file + ": its first line holds " + std::to_string(key.size()) +
                " characters; a team key has at least 32 (copy the head session's team.key)");
  return key;
}

}  // namespace yard::sched
