// What the head shows of a job beyond its record: its timeline (the spans its nodes appended, in
// Chrome's trace-event format) and the points of its own gauges (the dashboard's curves).
#include "head/job_requests.h"
#include "head/timeline.h"

namespace yard::sched {

using namespace detail;

void JobRequests::on_timeline(Incoming& in) {
  std::string job = in.msg->env().getBody().getTimeline();
  if (job.empty()) {
    auto ids = tables_->jobs.ids();
    if (ids.empty()) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no jobs yet");
    job = ids.back();
  }
  if (!tables_->jobs.get(job)) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no job " + job);
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setTimelineReply(chrome_trace(job, tables_->journals.timeline(job)));
  io_.reply(in.routing_id, m.finish());
}

// The points of a job's own gauges, oldest first, as one JSON array.
void JobRequests::on_job_curves(Incoming& in) {
  std::string job = in.msg->env().getBody().getJobCurves();
  if (!tables_->jobs.get(job)) return reply_.error(in, wire::ErrorCode::NOT_FOUND, "no job " + job);
  std::string out = "[";
  for (auto& p : tables_->journals.curves(job)) out += (out.size() > 1 ? "," : "") + p;
  OutMessage m(token_, in.msg->env().getRequestId(), true);
  m.env().getBody().setStatusReply(out + "]");
  io_.reply(in.routing_id, m.finish());
}

}  // namespace yard::sched
