// A process's environment beyond its job's (Ray's runtime_env): environment variables and a
// working directory for an actor's process, or for the workers that run a task.
//
//   yard::RuntimeEnv env;
//   env.env_vars["OMP_NUM_THREADS"] = "4";
//   env.working_dir = "/data/run-7";
//   auto a = yard::actor<Trainer>().runtime_env(env).remote();
//   auto r = yard::task(preprocess).runtime_env(env).remote(shard);
//
// A job's own environment reaches every worker of the job on every node: `yard submit --env
// K=V` and `--working-dir DIR`. An actor's or a task's adds to it (its variables win over the
// job's); a task runs in a worker started with its environment, which runs only tasks that ask
// for the same one.
// Switchyard's own variables (YARD_*) are not the user's to set.
#pragma once

#include <map>
#include <string>

namespace yard {

struct RuntimeEnv {
  std::map<std::string, std::string> env_vars;
  // An absolute directory on the node that runs the process ("": the job's working directory).
  // A node without it refuses the actor, saying so.
  std::string working_dir;

  // The JSON form, {"env_vars": {...}, "working_dir": "..."}; from_json(to_json()) == *this.
  std::string to_json() const;
  // Throws InvalidArgument saying what is wrong (not JSON, a field of the wrong kind, or what
  // check() refuses).
  static RuntimeEnv from_json(const std::string& text);
  // Throws InvalidArgument naming the first thing wrong: a variable name that is not a shell
  // name ([A-Za-z_][A-Za-z0-9_]*) or is one of Switchyard's own (YARD_*), a value with a NUL, a
  // working directory that is not an absolute path.
  void check() const;
  bool empty() const { return env_vars.empty() && working_dir.empty(); }
  bool operator==(const RuntimeEnv&) const = default;
};

}  // namespace yard
