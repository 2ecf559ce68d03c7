// The head's dashboard: a page (nodes, actors, placement groups, jobs with their logs, and a
// job's own gauges as live curves) and the JSON it is drawn from, over HTTP (cpp-httplib) on the
// head's host, HTTPS beyond loopback (web_server.h). Every request needs the cluster's web key:
// `/?key=...` (what `yard dashboard` prints) sets it as a cookie for the page's later requests;
// an `Authorization: Bearer` header works too; anything else gets 401 and nothing more. The page works offline: Chart.js is served
// from Debian's libjs-chart.js. The handlers ask the head over its own socket, as the CLI does.
#pragma once

#include <memory>
#include <string>
#include <mutex>

#include "common/web_server.h"

namespace yard::sched {

class BlockingClient;

class Dashboard {
 public:
  // Listens on host:port (0: any free port). Throws yard::Error when it cannot.
  Dashboard(const std::string& host, int port, const std::string& head_address, const std::string& token,
            const WebIdentity& tls = {});
  ~Dashboard();
  // "http://host:port", or "https://host:port" with a web identity
  const std::string& url() const { return url_; }

 private:
  void routes();
  bool authorized(const void* request) const;
  std::string ask(const std::string& what, const std::string& arg);

  std::string key_;  // the cluster's web key (link_security.h), not its token
  std::unique_ptr<BlockingClient> head_;
  std::mutex head_mu_;
  std::string url_;
  std::unique_ptr<WebServer> server_;  // last: stopped before what its handlers use goes
};

// The page (dashboard_page.cc).
const char* dashboard_page();

}  // namespace yard::sched
