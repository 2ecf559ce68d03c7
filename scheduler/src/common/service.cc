#include "common/service.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <kj/exception.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/spdlog.h>

#include "yard/process.h"
#include "yard/errors.h"

namespace fs = std::filesystem;

namespace yard::sched {

using namespace detail;

namespace {
std::atomic<bool> g_stop{false};
}  // namespace

void Replies::ok(const Incoming& in) const {
  OutMessage m(token_, in.request_id(), true);
  m.env().getBody().setOk();
  io_.reply(in.routing_id, m.finish());
}

void Replies::error(const std::string& routing, uint64_t req, wire::ErrorCode code, const std::string& msg) const {
  OutMessage m(token_, req, true);
  set_error(m.env(), code, msg);
  io_.reply(routing, m.finish());
}

// The request's routing and id are taken first: a handler may move the request on (to answer it
// later) before it throws.
void Replies::guarded(const Incoming& in, const std::function<void()>& handler) const {
  std::string routing = in.routing_id;
  uint64_t req = 0;
  try {
    req = in.request_id();
    handler();
  } catch (const kj::Exception& e) {
    error(routing, req, wire::ErrorCode::BAD_REQUEST, std::string("malformed request: ") + e.getDescription().cStr());
  } catch (const DecodeError& e) {
    error(routing, req, wire::ErrorCode::BAD_REQUEST, e.what());
  } catch (const ConnectionError& e) {
    spdlog::error("request failed: {}", e.what());
    error(routing, req, wire::ErrorCode::UNAVAILABLE, std::string("the control store is unreachable; retry: ") + e.what());
  } catch (const std::exception& e) {
    spdlog::error("request failed: {}", e.what());
    error(routing, req, wire::ErrorCode::INTERNAL, e.what());
  }
}

void Replies::relay(const std::string& routing, uint64_t req, const InMessage& answer) const {
  auto body = answer.env().getBody();
  OutMessage m(token_, req, true);
  if (body.isError()) {
    set_error(m.env(), body.getError().getCode(), body.getError().getMessage());
  } else if (body.isJobInfo()) {
    m.env().getBody().setJobInfo(body.getJobInfo());
  } else if (body.isOk()) {
    m.env().getBody().setOk();
  } else {
    set_error(m.env(), wire::ErrorCode::INTERNAL, "unexpected answer from the node manager");
  }
  io_.reply(routing, m.finish());
}

void notify(Messenger& io, const std::string& address, Frames request, uint64_t rid) {
  io.request(address, rid, std::move(request), [](std::unique_ptr<InMessage>, std::optional<LocalError>) {},
             std::chrono::seconds(10));
}

void request_stop() { g_stop.store(true); }

void take_stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

bool wait_for_stop(pid_t parent_pid, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  while (!g_stop.load()) {
    if (std::chrono::steady_clock::now() >= end) return false;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    auto left = std::min<std::chrono::milliseconds>(
        std::chrono::milliseconds(100),
        std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now()));
    timespec ts{0, std::max<long>(1, static_cast<long>(left.count())) * 1000 * 1000};
    int sig = sigtimedwait(&set, nullptr, &ts);
    if (sig == SIGTERM || sig == SIGINT || sig == SIGHUP) {
      spdlog::info("signal {}: shutting down", sig);
      g_stop.store(true);
      return true;
    }
    if (parent_pid && kill(parent_pid, 0) != 0) {
      spdlog::info("parent {} is gone: shutting down", parent_pid);
      g_stop.store(true);
      return true;
    }
  }
  return true;
}

void open_log(const std::string& log_dir, const std::string& name) {
  auto file_sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(log_dir + "/" + name + ".log");
  auto logger = std::make_shared<spdlog::logger>(name, spdlog::sinks_init_list{file_sink});
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

void report_failure(int& ready_fd, const std::string& what) {
  spdlog::error("{}", what);
  report_ready(ready_fd, "ERROR: " + what);
  fprintf(stderr, "yard: %s\n", what.c_str());
}

void report_ready(int& fd, const std::string& line) {
  if (fd < 0) return;
  std::string l = line + "\n";
  (void)!write(fd, l.data(), l.size());
  close(fd);
  fd = -1;
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return "killed by signal " + std::to_string(sig) + " (" + strsignal(sig) + ")";
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

Problem write_file_atomic(const std::string& path, const char* data, size_t size) {
  std::error_code ec;
  fs::create_directories(fs::path(path).parent_path(), ec);
  std::string tmp = path + ".tmp" + random_hex(3);
  {
    std::ofstream out(tmp, std::ios::binary);
    out.write(data, static_cast<std::streamsize>(size));
    if (!out) return "cannot write " + tmp;
  }
  chmod(tmp.c_str(), 0755);
  fs::rename(tmp, path, ec);
  if (ec) return "cannot write " + path + ": " + ec.message();
  return std::nullopt;
}

}  // namespace yard::sched
