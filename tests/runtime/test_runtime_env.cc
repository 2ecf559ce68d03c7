// RuntimeEnv (yard/runtime_env.h): its JSON form round-trips, and what it refuses is refused with
// a message that names it.
#include <catch2/catch.hpp>

#include "yard/errors.h"
#include "yard/runtime_env.h"

using yard::RuntimeEnv;

TEST_CASE("a runtime_env's JSON form round-trips", "[runtime_env]") {
  RuntimeEnv e;
  e.env_vars = {{"OMP_NUM_THREADS", "4"}, {"GREETING", "a \"quoted\" value, with = and \n"}};
  e.working_dir = "/data/run-7";
  CHECK(RuntimeEnv::from_json(e.to_json()) == e);
  CHECK(RuntimeEnv::from_json(RuntimeEnv{}.to_json()).empty());
  CHECK(RuntimeEnv::from_json(R"({"env_vars": {"A": "1"}})").env_vars.at("A") == "1");
}

TEST_CASE("a runtime_env that cannot work is refused, saying why", "[runtime_env]") {
  auto refused = [](const std::string& json, const std::string& says) {
    try {
      RuntimeEnv::from_json(json);
    } catch (const yard::InvalidArgument& e) {
      return std::string(e.what()).find(says) != std::string::npos;
    }
    return false;
  };
  CHECK(refused("not json", "not a JSON object"));
  CHECK(refused("[1, 2]", "not a JSON object"));
  CHECK(refused(R"({"env_vars": {"A": 1}})", "env_vars.A is not a string"));
  CHECK(refused(R"({"env_vars": ["A=1"]})", "env_vars is not an object"));
  CHECK(refused(R"({"working_dir": 7})", "working_dir is not a string"));
  CHECK(refused(R"({"pip": ["torch"]})", "unknown field 'pip'"));
  CHECK(refused(R"({"env_vars": {"1ABC": "x"}})", "'1ABC' is not a variable name"));
  CHECK(refused(R"({"env_vars": {"A-B": "x"}})", "'A-B' is not a variable name"));
  CHECK(refused(R"({"env_vars": {"YARD_TOKEN": "x"}})", "YARD_TOKEN is Switchyard's own"));
  CHECK(refused(R"({"working_dir": "relative/dir"})", "not an absolute path"));
  RuntimeEnv nul;
  nul.env_vars["A"] = std::string("x\0y", 3);
  CHECK_THROWS_AS(nul.check(), yard::InvalidArgument);
}
