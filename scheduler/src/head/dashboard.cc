#include "head/dashboard.h"

#include <fstream>
#include <mutex>
#include <sstream>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "blocking_client.h"
#include "job_commands.h"
#include "yard/internal/messaging.h"
#include "yard/errors.h"

namespace yard::sched {

namespace {

// Chart.js as Debian installs it (libjs-chart.js).
const char* kChartJs = "/usr/share/javascript/chart.js/chart.min.js";

std::string cookie_key(const httplib::Request& req) {
  auto cookies = req.get_header_value("Cookie");
  std::string key = "yard_key=";
  for (size_t at = 0; (at = cookies.find(key, at)) != std::string::npos; at += key.size())
    if (at == 0 || cookies[at - 1] == ' ' || cookies[at - 1] == ';') {
      auto end = cookies.find(';', at);
      return cookies.substr(at + key.size(), end == std::string::npos ? std::string::npos : end - at - key.size());
    }
  return "";
}

}  // namespace

Dashboard::Dashboard(const std::string& host, int port, const std::string& head_address, const std::string& token,
                     const WebIdentity& tls)
    : key_(detail::web_key_for(token)), head_(std::make_unique<BlockingClient>(head_address, token)),
      server_(std::make_unique<WebServer>(tls, 2)) {
  routes();
  int bound = server_->listen(host, port);
  if (bound <= 0) throw Error("the dashboard cannot listen on " + host + ":" + std::to_string(port));
  url_ = std::string(tls.scheme()) + "://" + host + ":" + std::to_string(bound);
}

Dashboard::~Dashboard() = default;

bool Dashboard::authorized(const void* r) const {
  auto& req = *static_cast<const httplib::Request*>(r);
  if (req.has_param("key") && req.get_param_value("key") == key_) return true;
  if (req.get_header_value("Authorization") == "Bearer " + key_) return true;
  return cookie_key(req) == key_;
}

// A head request for the page's JSON: "status", "jobs" (the queue's view), "logs" (arg: job,
// offset), "curves" (arg: job).
std::string Dashboard::ask(const std::string& what, const std::string& arg) {
  std::lock_guard lk(head_mu_);
  if (what == "status") return head_->call([](auto env) { env.getBody().setStatus(); })->env().getBody().getStatusReply();
  if (what == "jobs") return job_list_json(*head_).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (what == "curves")
    return head_->call([&](auto env) { env.getBody().setJobCurves(arg); })->env().getBody().getStatusReply();
  auto space = arg.find(' ');
  std::string job = arg.substr(0, space);
  uint64_t offset = space == std::string::npos ? 0 : std::stoull(arg.substr(space + 1));
  auto r = head_->call([&](auto env) {
    auto jl = env.getBody().initJobLogs();
    jl.setJobId(job);
    jl.setOffset(offset);
    jl.setMaxBytes(256 << 10);
  });
  auto lr = r->env().getBody().getJobLogsReply();
  auto data = lr.getData();
  return nlohmann::json{{"text", std::string(reinterpret_cast<const char*>(data.begin()), data.size())},
                        {"offset", lr.getNextOffset()},
                        {"ended", lr.getFinished()}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void Dashboard::routes() {
  auto guard = [this](auto handler) {
    return [this, handler](const httplib::Request& req, httplib::Response& res) {
      if (!authorized(&req)) {
        res.status = 401;
        res.set_content("401: the cluster's web key is required (yard dashboard prints the address with it)\n",
                        "text/plain");
        return;
      }
      try {
        handler(req, res);
      } catch (const std::exception& e) {
        res.status = 502;
        res.set_content(nlohmann::json{{"error", e.what()}}.dump(), "application/json");
      }
    };
  };
  server_->http().Get("/", guard([this](const httplib::Request& req, httplib::Response& res) {
    if (req.has_param("key"))  // later requests carry it as a cookie, not in the address
      res.set_header("Set-Cookie", "yard_key=" + key_ + "; HttpOnly; SameSite=Strict; Path=/");
    res.set_content(dashboard_page(), "text/html; charset=utf-8");
  }));
  server_->http().Get("/api/status", guard([this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ask("status", ""), "application/json");
  }));
  server_->http().Get("/api/jobs", guard([this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ask("jobs", ""), "application/json");
  }));
  server_->http().Get(R"(/api/jobs/([\w.-]+)/logs)", guard([this](const httplib::Request& req, httplib::Response& res) {
    std::string offset = req.has_param("offset") ? req.get_param_value("offset") : "0";
    if (offset.empty() || offset.find_first_not_of("0123456789") != std::string::npos) offset = "0";
    res.set_content(ask("logs", req.matches[1].str() + " " + offset), "application/json");
  }));
  server_->http().Get(R"(/api/jobs/([\w.-]+)/curves)", guard([this](const httplib::Request& req, httplib::Response& res) {
    res.set_content(ask("curves", req.matches[1].str()), "application/json");
  }));
  server_->http().Get("/static/chart.js", guard([](const httplib::Request&, httplib::Response& res) {
    std::ifstream f(kChartJs);
    if (!f) {
      res.status = 404;
      res.set_content(std::string("Chart.js is not installed (") + kChartJs + ": Debian package libjs-chart.js)",
                      "text/plain");
      return;
    }
    std::stringstream s;
    s << f.rdbuf();
    res.set_content(s.str(), "application/javascript");
  }));
}

}  // namespace yard::sched
