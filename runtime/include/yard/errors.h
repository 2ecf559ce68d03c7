// Typed exceptions of the Switchyard user API.
//
// Every error a program can see from the runtime derives from yard::Error. Errors raised by user
// code on another process arrive as RemoteError, carrying the remote exception's type, message and
// the place it was thrown (function, worker, pid, node).
#pragma once

#include <stdexcept>
#include <string>

namespace yard {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// User code threw on a worker. what() is "<type>: <message> (at <location>)".
class RemoteError : public Error {
 public:
  RemoteError(std::string type, std::string message, std::string location)
      : Error(type + ": " + message + " (at " + location + ")"),
        type_(std::move(type)),
        message_(std::move(message)),
        location_(std::move(location)) {}
  const std::string& remote_type() const { return type_; }
  const std::string& remote_message() const { return message_; }
  const std::string& location() const { return location_; }

 private:
  std::string type_, message_, location_;
};

// The worker process running a task died (segfault, abort, kill -9) and no retries were left.
class WorkerCrashed : public Error {
 public:
  using Error::Error;
};

// The actor is dead: killed, its process crashed, or its constructor threw.
class ActorDied : public Error {
 public:
  using Error::Error;
};

// The actor's process (or node) was lost while this call ran, and the actor was restarted: the
// call may or may not have taken effect. Later calls go to the restarted actor.
class ActorRestarting : public ActorDied {
 public:
  using ActorDied::ActorDied;
};

// The object's owner (the process that created it) is gone, and the object with it: a borrower
// cannot fetch it any more.
class OwnerDied : public Error {
 public:
  using Error::Error;
};

// A wait passed its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// No node of the cluster can ever satisfy a request (e.g. more CPUs than any node has).
class InfeasibleError : public Error {
 public:
  using Error::Error;
};

// The cluster token was missing or wrong.
class AuthError : public Error {
 public:
  using Error::Error;
};

// A cluster address could not be reached, or a daemon could not be started.
class ConnectionError : public Error {
 public:
  using Error::Error;
};

// A request was asked with an option that cannot be: a resource amount that is not a positive
// finite number, or above 1 and not whole; a name that is taken. Thrown where it was given.
class InvalidArgument : public Error {
 public:
  using Error::Error;
};

// A name (function, actor class, method, named actor) is not registered or not found.
class NotFoundError : public Error {
 public:
  using Error::Error;
};

}  // namespace yard
