#include "scale_fanout.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <zmq.hpp>

#include "proc_stats.h"
#include "yard/process.h"

namespace yard::bench::fanout {

namespace {

using yard::bench::cpu_seconds;

void quiet(zmq::socket_t& s) {
  s.set(zmq::sockopt::linger, 0);
  s.set(zmq::sockopt::sndhwm, 0);
  s.set(zmq::sockopt::rcvhwm, 0);
}

int bound_port(zmq::socket_t& s) {
  std::string ep = s.get(zmq::sockopt::last_endpoint);
  return std::stoi(ep.substr(ep.rfind(':') + 1));
}

// The echo processes for `nodes` nodes, `per_process` in each: their pids and every node's port.
std::pair<std::vector<pid_t>, std::vector<int>> start_echoes(int nodes, int per_process) {
  std::vector<pid_t> pids;
  std::vector<int> ports;
  for (int left = nodes; left > 0; left -= per_process) {
    yard::sys::SpawnOptions so;
    so.death_signal = SIGTERM;
    auto [pid, line] = yard::sys::spawn_ready(
        {yard::sys::self_exe(), "--echo-nodes", std::to_string(std::min(left, per_process))}, so,
        std::chrono::seconds(60));
    pids.push_back(pid);
    if (line.empty()) throw std::runtime_error("an echo process did not start");
    size_t at = 0;
    while (at < line.size()) {
      size_t comma = line.find(',', at);
      if (comma == std::string::npos) comma = line.size();
      ports.push_back(std::stoi(line.substr(at, comma - at)));
      at = comma + 1;
    }
  }
  return {pids, ports};
}

void stop_echoes(const std::vector<pid_t>& pids) {
  for (auto p : pids) kill(p, SIGTERM);
  for (auto p : pids) waitpid(p, nullptr, 0);
}

std::string node_name(size_t i) { return "n" + std::to_string(i); }

// Sends one request to each of nodes [first, first + count) (mod the number of nodes), then
// takes as many replies. Sends to a node whose connection is not up yet are tried again.
void one_batch(zmq::socket_t& s, size_t nodes, size_t first, size_t count) {
  static const char payload[64] = {};
  for (size_t j = 0; j < count; ++j) {
    std::string id = node_name((first + j) % nodes);
    while (true) {
      try {
        if (s.send(zmq::buffer(id), zmq::send_flags::sndmore)) break;
      } catch (const zmq::error_t& e) {
        if (e.num() != EHOSTUNREACH) throw;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));  // connecting (warm-up only)
    }
    s.send(zmq::buffer(payload, sizeof payload), zmq::send_flags::none);
  }
  for (size_t j = 0; j < count; ++j) {
    zmq::message_t id, m;
    (void)s.recv(id);
    (void)s.recv(m);
  }
}

// Echoes what reaches `s`, for ever (one node, its own thread).
[[noreturn]] void echo(zmq::socket_t& s) {
  while (true) {
    zmq::message_t id, m;
    if (!s.recv(id)) continue;
    (void)s.recv(m);
    s.send(id, zmq::send_flags::sndmore);
    s.send(m, zmq::send_flags::none);
  }
}

// The same for all of `sockets` from one thread.
[[noreturn]] void echo_all(std::vector<std::unique_ptr<zmq::socket_t>>& sockets) {
  std::vector<zmq::pollitem_t> items;
  for (auto& s : sockets) items.push_back({s->handle(), 0, ZMQ_POLLIN, 0});
  while (true) {
    zmq::poll(items.data(), items.size(), std::chrono::milliseconds(-1));
    for (size_t i = 0; i < items.size(); ++i) {
      if (!(items[i].revents & ZMQ_POLLIN)) continue;
      zmq::message_t id, m;
      while (sockets[i]->recv(id, zmq::recv_flags::dontwait)) {
        (void)sockets[i]->recv(m);
        sockets[i]->send(id, zmq::send_flags::sndmore);
        sockets[i]->send(m, zmq::send_flags::none);
      }
    }
  }
}

}  // namespace

int serve_echo(int nodes, int ready_fd) {
  zmq::context_t ctx(2);
  std::vector<std::unique_ptr<zmq::socket_t>> sockets;
  std::string ports;
  for (int i = 0; i < nodes; ++i) {
    auto s = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
    quiet(*s);
    s->bind("tcp://127.0.0.1:0");
    ports += (i ? "," : "") + std::to_string(bound_port(*s));
    sockets.push_back(std::move(s));
  }
  std::vector<std::thread> threads;
  if (getenv("SCALE_ECHO_ONE_THREAD"))  // one thread serves all the process's nodes
    threads.emplace_back([&] { echo_all(sockets); });
  else
    for (auto& s : sockets) threads.emplace_back([&s = *s] { echo(s); });
  ports += "\n";
  (void)!write(ready_fd, ports.data(), ports.size());
  close(ready_fd);
  while (true) pause();  // until SIGTERM
}

Figures round_trips(int nodes, int per_process, int total, int batch) {
  auto [pids, ports] = start_echoes(nodes, per_process);
  Figures f;
  try {
    zmq::context_t ctx(1);
    zmq::socket_t s(ctx, zmq::socket_type::router);
    quiet(s);
    s.set(zmq::sockopt::router_mandatory, 1);
    for (size_t i = 0; i < ports.size(); ++i) {
      s.set(zmq::sockopt::connect_routing_id, node_name(i));
      s.connect("tcp://127.0.0.1:" + std::to_string(ports[i]));
    }
    size_t n = ports.size();
    one_batch(s, n, 0, n);  // every connection made and used once
    size_t first = 0;
    std::vector<double> rates;
    auto echo_cpu = [&pids = pids] {
      double s = 0;
      for (auto p : pids) s += cpu_seconds(p);
      return s;
    };
    double self0 = cpu_seconds(getpid()), echo0 = echo_cpu();
    for (int run = 0; run < 3; ++run) {
      auto t0 = std::chrono::steady_clock::now();
      for (int done = 0; done < total; done += batch) {
        one_batch(s, n, first, static_cast<size_t>(batch));
        first = (first + static_cast<size_t>(batch)) % n;
      }
      rates.push_back(total / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    double trips = 3.0 * total;
    f.sender_cpu_us = (cpu_seconds(getpid()) - self0) / trips * 1e6;
    f.echo_cpu_us = (echo_cpu() - echo0) / trips * 1e6;
    std::sort(rates.begin(), rates.end());
    f.per_s = rates[1];
  } catch (...) {
    stop_echoes(pids);
    throw;
  }
  stop_echoes(pids);
  return f;
}

}  // namespace yard::bench::fanout
