// What the job queue allows this job now, for programs that size themselves to it. A job
// submitted with a shape (`yard submit --replicas MIN:MAX`) is admitted with between MIN and MAX
// elastic replicas; the head grows the allotment as room appears and shrinks it when a job of
// higher priority (or a team reclaiming its guarantee) needs the room. An elastic group reads it
// at every step boundary: it asks for no more replicas than allotted, and lets replicas go (those
// on the nodes named first) when the allotment shrinks.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace yard {

struct JobAllotment {
  int replicas = 0;                  // elastic replicas the job may hold now
  std::vector<std::string> nodes;    // where the queue put them: a node once per replica given
  std::vector<std::string> release;  // nodes whose replicas the head asked to leave
  // The queue asks the job to stop by `stop_by` (unix seconds; 0: it is not asked): it was
  // preempted at its MIN (a higher-priority job, a team reclaiming its guarantee, or a spot notice
  // on one of its nodes) or reached its time limit. The job commits a checkpoint and exits (any
  // status but 0); after the deadline its program is stopped (SIGTERM). A preempted job is queued
  // again and, when admitted, runs again with YARD_JOB_ATTEMPT one higher: it resumes from its
  // checkpoint.
  double stop_by = 0;
  bool requeued_after = false;  // the stop is a preemption: the job runs again later
  bool stop_asked() const { return stop_by > 0; }
  // The latest preemption the job gave way to, naming who took the room ("1 replica released (on
  // node-3) for job-7 at 1796600000"); "" when there was none.
  std::string preempted;
};

// This job's allotment (yard::job_id()), or nullopt when it was not admitted by the job queue (a
// job without a shape takes whatever room it finds). Needs yard::init. Thread-safe. Throws
// yard::Error when the control store cannot be reached.
std::optional<JobAllotment> job_allotment();

}  // namespace yard
