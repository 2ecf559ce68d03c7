# Switchyard wire protocol: every message between Switchyard processes is an Envelope.
#
# Framing on ZeroMQ: frame 0 is the Envelope (a flat Cap'n Proto message); frames 1..n are
# out-of-band blobs that a Value refers to by index (large user values travel this way, so the
# bytes are never copied into the Cap'n Proto segment). Readers set the traversal limit from the
# received size and reject anything that does not decode, with an Error reply.
#
# Several one-frame Envelopes to the same peer may travel as one frame, a batch (runtime/src/
# wire.h: 8 bytes of magic, then each Envelope's length and bytes); version 4 added batches,
# version 5 calls to one actor that travel together (pushTasks), version 6 their replies
# (taskReplies), version 7 states and placement strategies as enums (they were text).
@0xe2b14835e4bbeaf3;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("yard::wire");

const protocolVersion :UInt16 = 7;

# An actor's state, as the head records it (yard/internal/states.h: states::ActorState).
enum ActorState {
  pending @0;
  alive @1;
  restarting @2;
  dead @3;
}

# A placement group's state (states::GroupState).
enum GroupState {
  pending @0;
  created @1;
  rescheduling @2;
  removed @3;
}

# How a placement group's bundles are spread (yard::PlacementStrategy).
enum PlacementStrategy {
  pack @0;
  spread @1;
  strictPack @2;
  strictSpread @3;
}

enum ErrorCode {
  ok @0;
  badRequest @1;       # the message did not decode or made no sense
  unauthenticated @2;  # missing or wrong cluster token
  notFound @3;         # no such actor, job, function, method
  infeasible @4;       # no node can ever satisfy the request: do not retry
  unavailable @5;      # not now: retry later
  taskError @6;        # user code threw; type/message/location say what and where
  workerCrashed @7;    # the worker process died while running the call
  actorDied @8;        # the actor is dead (killed, crashed, or its constructor failed)
  timeout @9;
  versionMismatch @10;
  internal @11;
  actorRestarting @12; # the actor's process was lost while this call ran; it is being restarted
  ownerDied @13;       # the process that owned this object is gone, and the object with it
  staleEpoch @14;      # from a head whose lease another head has taken since: not acted on
}

struct Error {
  code @0 :ErrorCode;
  type @1 :Text;       # remote exception type (demangled)
  message @2 :Text;
  location @3 :Text;   # where it was thrown: function, worker, pid, node
}

struct ShmRef {
  name @0 :Text;       # a shared-memory segment of the sender's pool (same host only)
  offset @1 :UInt64;
  size @2 :UInt64;
  generation @3 :UInt64; # the segment's use this slot belongs to (a reused segment is not read)
}

struct Value {
  union {
    inline @0 :Data;   # codec bytes
    frame @1 :UInt32;  # index of an out-of-band frame (1-based) holding the codec bytes
    shm @2 :ShmRef;    # the codec bytes in shared memory, for a receiver on the same host
    held @3 :HeldValue;  # a large result for a receiver on another host: fetched in parts
  }
}

# A task's large result, kept by the process that computed it until the caller has fetched it
# (getObjectPart) and released it (releaseObject).
struct HeldValue {
  holder @0 :Text;   # host:port of the process that keeps it
  id @1 :Text;       # the id it keeps it under
  size @2 :UInt64;
}

struct Resource {
  name @0 :Text;
  amount @1 :Float64;
}

struct RegisterJob {
  binary @0 :Text;         # absolute path of the driver binary; workers run it in worker mode
  argv @1 :List(Text);
  cwd @2 :Text;
  pid @3 :Int32;           # driver pid: the job ends when it exits
  submissionId @4 :Text;   # set when started by `yard submit`
  binaryDigest @5 :Text;   # sha256 of the binary, uploaded to the head (hasBlob/putBlob) first
  namespace @6 :Text;      # where its actors' and groups' names live ("" : its own, named by its id)
  detachedActors @7 :Bool; # its actors that do not choose a lifetime outlive it
}

# Part of an object, for a borrower on another host: a large object crosses hosts in parts,
# several in flight, so that calls on the same connection are not held up behind it and the
# receiver writes each part into place as it arrives.
struct ObjectPartRequest {
  id @0 :Text;
  offset @1 :UInt64;
  length @2 :UInt64;      # the server sends at most this many bytes (and at most its own part size)
}

struct ObjectPart {
  total @0 :UInt64;       # the whole value's size
  offset @1 :UInt64;
  data @2 :Value;         # the bytes from offset on
  dataLink @3 :DataLink;  # set in the first part of a larger value, when the holder has one
}

# A holder's sealed data link (runtime/src/sealed_link.h): the rest of a large value's parts are
# asked for there, each message sealed with AES-256-GCM under `key`. Offered only over an
# encrypted link, so the key is never seen in clear.
struct DataLink {
  address @0 :Text;       # host:port of the holder's data listener
  key @1 :Data;           # 32 bytes, the holder's own, made when it started
}

# Content-addressed files (job binaries) kept by the head and fetched by nodes.
struct Blob {
  digest @0 :Text;         # sha256, hex
  data @1 :Value;
}

struct JobRegistered {
  jobId @0 :Text;
  nodeId @1 :Text;          # the node whose manager serves this driver's leases
  numCpus @2 :Float64;
  nodeAddress @3 :Text;     # that node manager's address
}

# Head -> node manager: start workers for a job whose driver leases from this node.
struct WarmPool {
  jobId @0 :Text;
  count @1 :UInt32;
}

struct RequestLease {
  jobId @0 :Text;
  count @1 :UInt32;        # workers wanted (each takes one CPU)
  timeoutMs @2 :UInt32;
  spilled @3 :Bool;        # sent here by another node: wait here, do not send it on again
  noWait @4 :Bool;         # answer now, even with no workers (the submitter already has some)
  resources @5 :List(Resource);  # what each worker holds while leased (empty: one CPU)
  nodeId @6 :Text;         # node affinity: lease on this node ...
  soft @7 :Bool;           # ... or, when soft, anywhere if it is gone
  spread @8 :Bool;         # SPREAD: the node with the most free CPUs, this one included
  placementGroup @9 :Text; # lease inside this placement group's bundle ...
  bundleIndex @10 :Int32;  # ... with this index (-1: any bundle with room)
  requester @11 :Text;     # the asking process's worker id ("" : a driver): the workers leased to
                           # it go back when its process exits on this node
  runtimeEnv @12 :Text;    # the workers' variables and directory beyond the job's (yard/runtime_env.h
                           # as JSON; "": the job's own): only workers started with it are leased
}

struct LeasedWorker {
  workerId @0 :Text;
  address @1 :Text;
}

struct LeaseGranted {
  workers @0 :List(LeasedWorker);
  spillback @1 :Text;      # no room here now, but there is at this node manager: ask it
  waiting @2 :Text;        # no node of the cluster can hold it: why (it waits for one that can)
}

struct ReturnLease {
  jobId @0 :Text;
  workerIds @1 :List(Text);
}

struct RegisterWorker {
  workerId @0 :Text;
  address @1 :Text;
  pid @2 :Int32;
}

struct CreateActor {
  actorId @0 :Text;
  jobId @1 :Text;
  className @2 :Text;
  args @3 :List(Value);
  name @4 :Text;             # empty: anonymous
  resources @5 :List(Resource);
  maxConcurrency @6 :UInt32;
  maxRestarts @7 :Int32;     # restarts after its process or node is lost; -1: unlimited
  strategy @8 :Text;         # "" (default: local first, spill when busy) | "SPREAD"
  nodeId @9 :Text;           # node affinity: run on this node ...
  soft @10 :Bool;            # ... or, when soft, anywhere if that node cannot take it
  callerNode @11 :Text;      # the node of the process creating it ("local" for the default policy)
  placementGroup @12 :Text;  # place into this placement group's bundle ...
  bundleIndex @13 :Int32;    # ... with this index (-1: any bundle with room)
  detached @14 :Bool;        # outlives the job that created it
  infeasibleTimeoutMs @15 :UInt64; # fails after waiting this long for a node that can hold it (0: waits)
  concurrency @16 :Concurrency;    # how concurrent calls run (max_concurrency above 1, or groups)
  concurrencyGroups @17 :List(ConcurrencyGroup);
  namespace @18 :Text;       # where its name lives ("" : its job's namespace)
  lifetimeChosen @19 :Bool;  # `detached` is the creator's choice; else its job's default decides
  ownerActor @20 :Text;      # the actor whose code made it ("" : a driver or a task): a
                             # non-detached actor dies with its owner's process (Ray's fate-sharing)
  runtimeEnv @21 :Text;      # its process's variables and working directory beyond its job's
                             # (yard/runtime_env.h's JSON; "" : none)
}

# How a concurrent actor's calls run: each on a thread of a pool (Ray's max_concurrency), or each
# on a fiber of the worker's one executor thread.
enum Concurrency {
  threads @0;
  fibers @1;
}

# A named pool of an actor's calls with its own limit; its methods run there (a call may name
# another group). Calls of no group run in the default one, of max_concurrency.
struct ConcurrencyGroup {
  name @0 :Text;
  maxConcurrency @1 :UInt32;
  methods @2 :List(Text);
}

# Head -> node manager: start a worker for this actor and construct it there.
# The lines a node's workers wrote for an actor or a task (yard::log tags each with it).
struct FindLogLines {
  actorId @0 :Text;        # an actor's lines, or
  taskId @1 :Text;         # a task's (its result's object id)
  maxLines @2 :UInt32;     # the newest this many
}

struct HostActor {
  create @0 :CreateActor;
  numRestarts @1 :UInt32;
  release @2 :List(Resource); # what the node gives back to its pool when the worker exits
  resources @3 :List(Resource); # what the actor asked for (GPUs are assigned devices from it)
}

# Node manager -> head: the process of an actor this node hosted has exited.
struct ActorLost {
  actorId @0 :Text;
  cause @1 :Text;
  nodeId @2 :Text;
}

struct DrainNode {
  nodeId @0 :Text;
  timeoutMs @1 :UInt32;      # answered with an error if the node still has work then
  force @2 :Bool;            # at the timeout, stop what still runs instead of giving up
  notice @3 :Bool;           # a notice (spot reclaim): the node goes at the timeout whatever runs there;
                             # queued jobs that cannot shrink off it are checkpointed and requeued before
}

struct Bundle {
  resources @0 :List(Resource);
}

struct CreatePlacementGroup {
  groupId @0 :Text;
  jobId @1 :Text;
  strategy @2 :PlacementStrategy;
  bundles @3 :List(Bundle);
  name @4 :Text;
  namespace @5 :Text;      # where its name lives ("" : its job's namespace)
}

struct WaitPlacementGroup {
  groupId @0 :Text;
  timeoutMs @1 :UInt32;
}

struct PlacementGroupInfo {
  groupId @0 :Text;
  state @1 :GroupState;
  bundleNodes @2 :List(Text);
  waiting @3 :Text;        # no arrangement of the nodes can hold it: why (it waits for nodes that can)
}

struct ActorInfo {
  actorId @0 :Text;
  className @1 :Text;
  address @2 :Text;
  state @3 :ActorState;
  name @4 :Text;
  workerId @5 :Text;
  deathCause @6 :Text;
  nodeId @7 :Text;
  numRestarts @8 :UInt32;
  waiting @9 :Text;        # no node can hold it: why (pending: it waits; dead: it died of that)
}

struct GetActor {
  name @0 :Text;       # by name, or
  actorId @1 :Text;    # by id (a handle received as a value); answered once the actor is up
  lostAddress @2 :Text; # the caller lost the actor's process here: answer once it has moved
  namespace @3 :Text;   # where the name is looked up ("" : the name of an actor of any namespace
                        # made before namespaces existed)
}

struct KillActor {
  actorId @0 :Text;
  restart @1 :Bool;  # stop its process and restart it within its budget (Ray's no_restart = false)
  cause @2 :Text;    # why it ends, for those who call it ("" : killed by request)
}

struct PushTask {
  taskId @0 :Text;
  function @1 :Text;         # registered function name, or method name for actor calls
  actorId @2 :Text;          # empty for a normal task
  args @3 :List(Value);
  requestId @4 :UInt64;      # in pushTasks: the request this call is (its reply's requestId)
  concurrencyGroup @5 :Text; # an actor call's group, when the caller named one (else its method's)
  name @6 :Text;             # the name its caller gave it (timeline, errors); empty: its function's
}

struct TaskReply {
  result @0 :Value;
}

# One reply of a group (Envelope.taskReplies): an envelope of its own, whose token, version and
# host are its group's (left unset here).
struct GroupedReply {
  envelope @0 :Envelope;
}

struct SubmitJob {
  entrypoint @0 :List(Text);
  cwd @1 :Text;
  env @2 :List(Text);        # extra KEY=VALUE pairs
  workingDir @3 :Text;       # digest of an uploaded tar.gz: the job and its workers run in it
  maxRetries @4 :Int32;      # runs again (up to this many times) when its process dies by a signal
  # A job with a shape waits in the head's queue until its fixed parts and MIN replicas fit; one
  # without (shape.maxReplicas 0) runs at once, best effort, as before.
  team @5 :Text;
  priority @6 :Int32;
  shape @7 :JobShape;
  jobId @8 :Text;            # head -> node: the queued job it admitted (its record exists)
  teamCredential @9 :Text;   # with teams configured: the team's credential (`yard team-credential`)
  attempt @10 :UInt32;       # head -> node: the run's attempt (YARD_JOB_ATTEMPT; 0 means 1); a requeued job's next
  timeLimit @11 :Float64;    # seconds it may run once admitted (0: none); then it is stopped
  # The program runs on a node that has these (the head's node when it does; none: the head's).
  entrypointResources @12 :List(Resource);
}

struct JobShape {
  fixed @0 :List(Bundle);    # the driver and the job's other fixed parts
  replica @1 :List(Resource);  # one elastic replica
  minReplicas @2 :Int32;
  maxReplicas @3 :Int32;     # 0: no shape
  strategy @4 :PlacementStrategy;  # how its replicas spread over nodes
}

enum JobAction {
  cancel @0;                 # a queued job leaves the queue; a running one is stopped
  hold @1;                   # a queued job is not admitted until released
  release @2;
  setPriority @3;
}

struct JobControl {
  jobId @0 :Text;
  action @1 :JobAction;
  priority @2 :Int32;        # setPriority
}

struct JobInfo {
  jobId @0 :Text;
  entrypoint @1 :Text;
  status @2 :Text;           # RUNNING | SUCCEEDED | FAILED | STOPPED
  exitCode @3 :Int32;
  startTime @4 :Float64;
  endTime @5 :Float64;
  logPath @6 :Text;
  # Jobs with a shape (`yard submit --replicas`): their place in the queue.
  shaped @7 :Bool;
  team @8 :Text;
  priority @9 :Int32;
  replicas @10 :Int32;       # admitted replicas (0 while queued)
  minReplicas @11 :Int32;
  maxReplicas @12 :Int32;
  queuedAt @13 :Float64;
  waitReason @14 :Text;      # while queued: the reason's name ("no_room", "held", ...)
  waitDetail @15 :Text;      # and what and where
  preempted @16 :Text;       # the latest preemption it gave way to ("1 replica on N for job-3"), or ""
  nodeId @17 :Text;          # the node its program runs (or ran) on; its driver's node for one started by hand
}

struct JobLogs {
  jobId @0 :Text;
  offset @1 :UInt64;
  maxBytes @2 :UInt32;
}

struct JobLogsReply {
  data @0 :Data;
  nextOffset @1 :UInt64;
  finished @2 :Bool;         # the job has ended and everything up to nextOffset is all there is
  exitCode @3 :Int32;
}

struct ControlStore {
  address @0 :Text;    # host:port of the cluster's Redis
  password @1 :Text;
  tlsCert @2 :Text;    # PEM: the Redis speaks TLS with this certificate ("" : plain, loopback)
  webTlsKey @3 :Text;  # PEM: the key and certificate the cluster's web endpoints (metrics, the
  webTlsCert @4 :Text; # dashboard) serve HTTPS with beyond loopback ("" : plain HTTP, loopback)
}

# A process's metrics (yard/metrics.h and the runtime's own), sent to its node manager, which adds
# up its processes' series and serves them to Prometheus.
struct MetricTag {
  key @0 :Text;
  value @1 :Text;
}
struct MetricSeries {
  name @0 :Text;
  help @1 :Text;
  kind @2 :UInt8;               # 0 counter, 1 gauge, 2 histogram
  tags @3 :List(MetricTag);
  value @4 :Float64;            # counter, gauge
  bounds @5 :List(Float64);     # histogram: bucket upper bounds (then +Inf)
  buckets @6 :List(UInt64);     # histogram: counts per bucket (not cumulative)
  sum @7 :Float64;
  count @8 :UInt64;
}
# A task or actor call a process ran, for its job's timeline.
struct TaskEvent {
  name @0 :Text;
  kind @1 :Text;        # task, actor_call, lease, transfer
  startUs @2 :Int64;    # microseconds since the Unix epoch
  durUs @3 :Int64;
  ok @4 :Bool;          # returned (false: threw)
  count @5 :UInt64;     # a lease's workers, a transfer's bytes
}
# Spans of one process as its node keeps them in the control store (yard:timeline:<job>).
struct TimelineBatch {
  node @0 :Text;
  worker @1 :Text;
  pid @2 :Int32;
  events @3 :List(TaskEvent);
  dropped @4 :UInt64;   # spans the process could not keep
}
struct MetricsReport {
  pid @0 :Int32;
  series @1 :List(MetricSeries);   # every series of the process, cumulative
  job @2 :Text;                    # the process's job ("" for none)
  worker @3 :Text;                 # its worker id, or "driver"
  events @4 :List(TaskEvent);      # spans since the last report
  eventsDropped @5 :UInt64;        # spans lost since the last report (too many waiting)
}

struct Envelope {
  version @0 :UInt16;
  token @1 :Text;
  requestId @2 :UInt64;
  isReply @3 :Bool;
  body :union {
    error @4 :Error;
    ok @5 :Void;
    ping @6 :Void;
    registerJob @7 :RegisterJob;
    jobRegistered @8 :JobRegistered;
    requestLease @9 :RequestLease;
    leaseGranted @10 :LeaseGranted;
    returnLease @11 :ReturnLease;
    registerWorker @12 :RegisterWorker;
    createActor @13 :CreateActor;
    actorInfo @14 :ActorInfo;
    getActor @15 :GetActor;
    killActor @16 :KillActor;
    pushTask @17 :PushTask;
    taskReply @18 :TaskReply;
    status @19 :Void;
    statusReply @20 :Text;   # JSON document, for display
    submitJob @21 :SubmitJob;
    jobInfo @22 :JobInfo;
    listJobs @23 :Void;
    jobList @24 :List(JobInfo);
    jobLogs @25 :JobLogs;
    jobLogsReply @26 :JobLogsReply;
    stopJob @27 :Text;
    finishJob @28 :Text;
    shutdown @29 :Void;
    instantiateActor @30 :CreateActor;
    getObject @31 :Text;       # (protocol 2: objects are asked for with getObjectPart since)
    releaseObject @32 :Text;   # a borrower dropped its last reference
    getControlStore @33 :Void;
    controlStore @34 :ControlStore;
    hostActor @36 :HostActor;
    actorLost @37 :ActorLost;
    createPlacementGroup @38 :CreatePlacementGroup;
    waitPlacementGroup @39 :WaitPlacementGroup;
    placementGroupInfo @40 :PlacementGroupInfo;
    removePlacementGroup @41 :Text;
    killHosted @42 :Text;      # head -> node manager: stop this actor's process (no restart)
    drainNode @43 :DrainNode;  # answered (ok) once the node has no work left and has left
    hasBlob @44 :Text;         # ok, or notFound
    putBlob @45 :Blob;
    getBlob @46 :Text;         # answered with taskReply holding the bytes
    warmPool @47 :WarmPool;
    jobEnded @48 :Text;        # head -> node managers: the job's workers stop
    reportMetrics @49 :MetricsReport;  # a process -> its node manager (answered ok)
    timeline @50 :Text;        # to the head: a job's timeline ("" : the latest job)
    timelineReply @51 :Text;   # Chrome trace-event JSON
    jobCurves @52 :Text;       # to the head: a job's gauge points, answered with statusReply (JSON)
    restartJob @53 :Text;      # node -> head: a submitted job's program died and runs again: the
                               # last attempt's actors and placement groups go (answered ok)
    getObjectPart @54 :ObjectPartRequest;  # to an object's owner (or a host's copy): answered
                               # with objectPart, or with taskReply (the whole value) when the
                               # asker is on the same host
    objectPart @55 :ObjectPart;
    statusSummary @56 :Void;   # to the head: counts, and rows only for a small cluster (statusReply)
    pushTasks @57 :List(PushTask);  # calls to one actor made together, run in order: each a
                               # request of its own (PushTask.requestId), answered on its own
    taskReplies @58 :List(GroupedReply);  # replies to one requester's calls made together, each
                               # read as if it came alone (the group's requestId is 0)
    jobControl @59 :JobControl;  # to the head: cancel, hold, release or reprioritise a job (ok)
    whereIsHead @61 :Void;     # to a node manager: the cluster's active head now (headIs), which
                               # it follows in the control store; asked when a head is lost
    headIs @62 :Text;          # host:port of the active head
    findLogLines @63 :FindLogLines;  # to a node manager: its workers' log lines of an actor or a
                               # task (yard/log.h tags them), answered with statusReply (text)
  }
  senderHost @35 :Text;      # hostname/boot-id: equal hosts may pass large values in shared memory
  headEpoch @60 :UInt64;     # from a head: the epoch of its lease (0 from anyone else); a node
                             # refuses requests from a head of an older epoch than it knows
}
