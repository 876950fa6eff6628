/* dsv_policy.h — dsvisor's decisions as pure functions over plain structs: where the
 * instances run (placement), which instance takes a request (routing), and whether a
 * request is taken at all (admission). libc only: no syscalls, no I/O, no hwloc, so every
 * decision is tested on synthetic input (tests/unit/test-policy-*.c).
 *
 *     static struct dsv_topology topo;              // filled by dsv_topo_load() or a test
 *     static struct dsv_policy_placement plan;
 *     struct dsv_policy_place_request req = { .n_instances = 0 };   // 0: one per node
 *     int r = dsv_policy_place_instances(&topo, &req, &plan);
 *     for (int i = 0; r == 0 && i < plan.n_instances; i++) {
 *             int cpus[DSV_TOPOLOGY_MAX_PUS];
 *             int n = dsv_policy_instance_cpus(&topo, &plan.instances[i], cpus, DSV_TOPOLOGY_MAX_PUS);
 *             // pin worker i to cpus[0..n), bind its memory to node plan.instances[i].mem_node_os
 *     }
 *
 *     struct dsv_policy_router router;
 *     dsv_policy_router_init(&router, DSV_POLICY_ROUTE_LEAST_OUTSTANDING, seed);
 *     int w = dsv_policy_route_pick(&router, loads, n_workers, prompt, prompt_len);
 *     struct dsv_policy_admission adm;
 *     dsv_policy_admit(&limits, loads, n_workers, w, recent_rps, &adm);   // w may be -EAGAIN
 *
 * Ownership: every struct is caller-owned, fixed-size and pointer-free (a placement is
 * ~10 KiB: static or heap). Pointer arguments (workers, prompt) are read during the call
 * only; nothing here allocates, keeps a pointer or touches global state. A router is not
 * thread-safe: one per gateway thread, or a lock around it.
 * Functions return 0 (or a count or index ≥ 0) on success and a negative errno on failure;
 * out-parameters (ret_*, the last argument) are written only on success.
 */
#ifndef DSV_POLICY_H
#define DSV_POLICY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dsv_topology.h"

/* ---- topology ---------------------------------------------------------------------- */

/* Verifies the layout invariants of dsv_topology.h (counts in range, node core ranges
 * contiguous and in order, every core's PU range inside pus[], no PU listed twice).
 * Returns 0 or -EINVAL. */
int dsv_topology_check(const struct dsv_topology *topo);

/* ---- placement --------------------------------------------------------------------- */

#define DSV_POLICY_MAX_INSTANCES 256
#define DSV_POLICY_MAX_WARNINGS 16
#define DSV_POLICY_WARNING_LEN 160

enum dsv_policy_housekeeping {
        DSV_POLICY_HOUSEKEEPING_AUTO, /* one core of node 0 when the machine has > 2 cores */
        DSV_POLICY_HOUSEKEEPING_NONE, /* every core goes to instances */
        DSV_POLICY_HOUSEKEEPING_COUNT
};

struct dsv_policy_place_request {
        int n_instances;          /* 0: one per NUMA node that has cores */
        int threads_per_instance; /* 0: the number of cores in the instance's share */
        enum dsv_policy_housekeeping housekeeping;
};

struct dsv_policy_instance {
        int node;        /* index into dsv_topology.nodes */
        int mem_node_os; /* OS number of that node: cpuset.mems, mbind */
        int core_first;  /* the share: dsv_topology.cores[core_first, core_first + n_cores) */
        int n_cores;
        int n_pus;       /* PUs in the share, SMT siblings included */
        int n_threads;   /* compute threads to start */
        bool shared;     /* the share overlaps another instance's (oversubscribed) */
};

struct dsv_policy_placement {
        int n_instances;
        struct dsv_policy_instance instances[DSV_POLICY_MAX_INSTANCES];
        int housekeeping_core;  /* index into dsv_topology.cores, with all its PUs; -1: none */
        int n_unused_nodes;     /* nodes hosting no instance (memory-only nodes included) */
        int unused_nodes[DSV_TOPOLOGY_MAX_NODES]; /* indexes into dsv_topology.nodes */
        bool oversubscribed;    /* some core runs more than one compute thread */
        int n_warnings;         /* unused nodes, oversubscription; at most DSV_POLICY_MAX_WARNINGS */
        int n_warnings_dropped; /* beyond the cap; the last warning then says how many */
        char warnings[DSV_POLICY_MAX_WARNINGS][DSV_POLICY_WARNING_LEN];
};

/* Places instances on the topology:
 *   - by default one instance per NUMA node that has cores; more instances than such
 *     nodes are spread evenly (node counts differ by at most one, the extra instances
 *     going to the nodes with the most free cores); fewer leave nodes unused (reported);
 *   - each instance gets a disjoint, contiguous slice of its node's cores, whole cores
 *     with their SMT siblings, and its memory bound to that node; slices on one node
 *     differ by at most one core;
 *   - with HOUSEKEEPING_AUTO and more than two cores, node 0's first core (all its PUs)
 *     is kept for the supervisor and gateway;
 *   - n_threads = threads_per_instance, or the slice's core count when 0.
 * Oversubscription (more instances on a node than free cores, or more threads than the
 * slice's cores) is placed anyway and reported: ret->oversubscribed, the instance's
 * `shared` flag, and a warning. Returns 0; -EINVAL for a bad topology or request;
 * -E2BIG for more than DSV_POLICY_MAX_INSTANCES. */
int dsv_policy_place_instances(const struct dsv_topology *topo, const struct dsv_policy_place_request *req,
                               struct dsv_policy_placement *ret);

/* Writes the OS CPU numbers of the instance's slice into cpus[0..cap), ascending by
 * core. Returns the count, or -ENOBUFS when cap is too small, -EINVAL on bad input. */
int dsv_policy_instance_cpus(const struct dsv_topology *topo, const struct dsv_policy_instance *inst,
                             int *cpus, size_t cap);

/* Formats CPU numbers as a kernel cpulist ("0-3,8-11"; sorted, duplicates dropped),
 * NUL-terminated. Returns the string length; -ENOBUFS when it does not fit in size;
 * -EINVAL on bad input (negative CPU numbers, n > DSV_TOPOLOGY_MAX_PUS). */
int dsv_policy_cpulist_format(const int *cpus, size_t n, char *buf, size_t size);

/* Parses a kernel cpulist ("0-3,8,10-11"; "" is the empty list) into cpus[0..cap),
 * ascending, duplicates dropped. Returns the count; -EINVAL on bad syntax or a CPU
 * number of 65536 or more; -ENOBUFS when cap is too small. */
int dsv_policy_cpulist_parse(const char *s, int *cpus, size_t cap);

/* The operator's CPU choice on the CPUs dsvisor was given (`given`, the topology already
 * restricted to them): cpus is the list instances may use, housekeeping_cpus the list
 * kept for the supervisor, gateway and IRQs (each NULL or "" when not given; with only
 * housekeeping_cpus, instances get every other given CPU). *ret becomes `given`
 * restricted to the instances' CPUs: cores keep only listed PUs, nodes keep their place
 * (without cores they are memory-only). Place on it with DSV_POLICY_HOUSEKEEPING_NONE
 * when a list was given. Returns 1 when a list was given, 0 when neither was (*ret is a
 * copy of given); -EINVAL, with a message naming the CPUs in why, for a list that is not
 * a cpulist, lists a CPU outside the given set, overlaps the other list, or leaves fewer
 * cores than n_instances (at least one; 0 means one per node). */
int dsv_policy_cpus_choose(const struct dsv_topology *given, const char *cpus, const char *housekeeping_cpus,
                           int n_instances, struct dsv_topology *ret, char *why, size_t why_size);

/* ---- routing ----------------------------------------------------------------------- */

enum dsv_policy_route {
        DSV_POLICY_ROUTE_LEAST_OUTSTANDING, /* least queued prompt tokens + running sequences */
        DSV_POLICY_ROUTE_POWER_OF_TWO,      /* the less loaded of two random ready workers */
        DSV_POLICY_ROUTE_ROUND_ROBIN,       /* next ready worker in turn */
        DSV_POLICY_ROUTE_PREFIX_AFFINITY,   /* hash of the prompt prefix, least-outstanding fallback */
        DSV_POLICY_ROUTE_COUNT
};

const char *dsv_policy_route_to_string(enum dsv_policy_route route);
/* Returns the route named s ("least-outstanding", "power-of-two", "round-robin",
 * "prefix-affinity") or -EINVAL. */
int dsv_policy_route_from_string(const char *s);

/* One worker's state as the gateway sees it (worker stats plus readiness). */
struct dsv_policy_worker_load {
        bool ready;                    /* serving: not starting, draining, restarting or ejected */
        uint32_t queued_requests;      /* waiting, not yet running */
        uint32_t queued_prompt_tokens; /* prompt tokens of the waiting requests */
        uint32_t running_seqs;         /* sequences in the running batch */
        uint32_t max_batch;            /* sequences the worker runs at once (its batch's
                                          capacity); 0: not known, the running batch stands
                                          for it */
};

/* The work a worker still owes: queued prompt tokens plus running sequences. */
uint64_t dsv_policy_worker_outstanding(const struct dsv_policy_worker_load *w);

#define DSV_POLICY_PREFIX_BYTES_DEFAULT 256
#define DSV_POLICY_AFFINITY_MAX_LOAD_DEFAULT 4096

struct dsv_policy_router {
        enum dsv_policy_route route;
        uint64_t rng_state;          /* xorshift64* state: never 0 */
        uint32_t next;               /* round-robin cursor and tie-break start */
        uint32_t prefix_bytes;       /* prefix-affinity: bytes of the prompt hashed */
        uint64_t affinity_max_load;  /* prefix-affinity: above this outstanding work, fall back */
};

/* Sets up a router with the defaults above; the same seed gives the same choices.
 * Returns 0 or -EINVAL for an unknown route. */
int dsv_policy_router_init(struct dsv_policy_router *router, enum dsv_policy_route route, uint64_t seed);

/* Picks the worker for one request among workers[0..n). Only ready workers are picked.
 * prompt (prompt_len bytes; may be NULL/0 for policies other than prefix-affinity) is read
 * during the call only. Advances the router's cursor and RNG.
 * Returns the worker index; -EAGAIN when no worker is ready; -EINVAL on bad input. */
int dsv_policy_route_pick(struct dsv_policy_router *router, const struct dsv_policy_worker_load *workers,
                          size_t n, const void *prompt, size_t prompt_len);

/* ---- admission --------------------------------------------------------------------- */

enum dsv_policy_verdict {
        DSV_POLICY_VERDICT_ADMIT,       /* queue it on the chosen worker */
        DSV_POLICY_VERDICT_BUSY,        /* 429 Too Many Requests + Retry-After */
        DSV_POLICY_VERDICT_UNAVAILABLE, /* 503 Service Unavailable + Retry-After: none ready */
        DSV_POLICY_VERDICT_COUNT
};

const char *dsv_policy_verdict_to_string(enum dsv_policy_verdict v);

struct dsv_policy_admit_limits {
        uint32_t max_queue_per_instance; /* waiting requests per worker; 0: no limit */
        uint32_t max_queue_total;        /* waiting requests over all workers; 0: no limit */
        uint32_t retry_after_max_s;      /* clamp for the Retry-After estimate; 0: 60 */
        uint32_t retry_after_unavailable_s; /* Retry-After with no worker ready (restarts take
                                              seconds, not a queue drain); 0: 5 */
        uint32_t max_queue_wait_pct; /* the wait a new request may expect in the target's queue,
                                        in % of a request's service time; 0: no limit */
};

struct dsv_policy_admission {
        enum dsv_policy_verdict verdict;
        int http_status;       /* 0 (admit), 429 or 503 */
        uint32_t retry_after_s; /* ≥ 1 when rejected, 0 when admitted */
};

/* Decides on one request that the router sent to worker `target` (or the router's error:
 * -EAGAIN means no worker is ready). The request is admitted when the target is ready,
 * its queue is under max_queue_per_instance, all queues together are under
 * max_queue_total, and the wait a new request can expect in the target's queue is at
 * most max_queue_wait_pct % of the service time of a request. That wait only exists once
 * the target's batch is full (running_seqs ≥ max_batch: a new request waits for a slot);
 * then by Little's law it is queued × service time / max_batch, so the bound is a queue of
 * at most max_queue_wait_pct % of max_batch. While the batch is still filling the rule
 * does not apply: the queue there is requests on their way into free slots. (With
 * max_batch 0, not known, the running batch stands for the batch's capacity; off while
 * nothing runs there.) A full batch stays full with a queue of a fraction of it, and a
 * longer queue only adds wait. Otherwise
 * it is refused with 429 (queues full) or 503 (no worker
 * ready: target is -EAGAIN or every worker is unready; Retry-After is
 * retry_after_unavailable_s). A 429's Retry-After estimates how long the full queue takes
 * to drain: queued requests / recent_rps (for a per-instance refusal, the target's queue
 * over its share, recent_rps / ready workers), rounded up and kept between 1 and
 * retry_after_max_s; retry_after_max_s when recent_rps is 0 (1 for the wait bound, whose
 * queue drains within a service time).
 * Returns 0; -EINVAL on bad input (target out of range or not ready while others are,
 * negative or NaN rate). */
int dsv_policy_admit(const struct dsv_policy_admit_limits *limits, const struct dsv_policy_worker_load *workers,
                     size_t n, int target, double recent_rps, struct dsv_policy_admission *ret);

#endif
