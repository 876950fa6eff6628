/* dsv_gateway.h — the OpenAI-compatible HTTP gateway in front of dsvisor's workers:
 * libmicrohttpd serves /v1/chat/completions, /v1/completions, /v1/models,
 * /tokenize, /detokenize, /health, /ready, /metrics, and a status page (/ and /status); each request is routed (dsv_policy) to one "instance",
 * an nng link (dsv_ipc_dial) to a worker speaking ipc/PROTOCOL.md.
 *
 *     struct dsv_gateway_config cfg;
 *     dsv_gateway_config_init(&cfg);
 *     cfg.model = "deepseek-v2-lite";
 *     struct dsv_gateway *gw;
 *     dsv_gateway_new(&cfg, &gw);
 *     struct dsv_gateway_instance_config ic = {.name = "0", .numa_node = 0,
 *                                              .url = "ipc:///run/dsvisor-0/worker-0.sock", .ready = true};
 *     int id = dsv_gateway_instance_add(gw, &ic);        // an id >= 0
 *     dsv_gateway_start(gw);                             // HTTP on 127.0.0.1:cfg.port
 *     ...                                                // worker 0 restarts elsewhere:
 *     dsv_gateway_instance_set_ready(gw, id, false);
 *     dsv_gateway_instance_set_url(gw, id, "ipc:///run/dsvisor-0/worker-0b.sock");
 *     dsv_gateway_instance_set_ready(gw, id, true);
 *     dsv_gateway_free(gw);                              // stops HTTP, then the links
 *
 * Readiness: an instance takes requests when it is "up": marked ready by the caller, its
 * link has a connected peer, and — when health polling is on (health_interval_ms > 0) —
 * the worker's last health_reply, younger than three intervals, said "ready". A worker
 * that restarts at the same URL is re-dialled by nng by itself; requests it had in flight
 * are failed (or retried, see below) as soon as its pipe drops, or, with health polling,
 * as soon as its health reply carries another boot id (a restart quicker than the pipe
 * check). The polling's stats_reply feeds the load like dsv_gateway_instance_set_load()
 * does.
 *
 * Load: the gateway counts the requests it has in flight on each instance (up to the
 * batch's capacity count as running, the rest as waiting: the worker's reported
 * max_batch, max_running_per_instance until it reports one). A caller (or the stats
 * polling) may add the worker's own view with dsv_gateway_instance_set_load(); routing and
 * admission then use the larger of the two, field by field.
 *
 * Requests: admission (dsv_policy_admit) answers 429 + Retry-After when queues are full
 * or, with a known drain rate, when the queue would outlast the request's deadline, and
 * 503 + Retry-After when no instance is up. A connection beyond max_connections is
 * answered 503 + Retry-After by the accept path and closed: no connection is dropped
 * without a status line. While more than three quarters of max_connections are open,
 * idle kept-alive connections are closed after a second instead of
 * connection_timeout_s; a request past request_timeout_ms is cancelled on its
 * worker and answered 504 (or, once streaming began, ends with an error event); a client
 * that disconnects cancels its generation (a `cancel` message). A request whose worker dies
 * before any byte of the answer reached the client is retried once on another instance;
 * a stream that already began ends with `data: {"error":...}` and `data: [DONE]`.
 *
 * Threads and ownership: the HTTP server runs one thread per connection; each link has one
 * receiver thread. Every function here may be called from any thread, but not with the
 * same gateway after or during dsv_gateway_free(). Strings passed in are copied. The
 * metrics hook is called from an HTTP thread while /metrics is rendered, without any
 * gateway lock held; it must not call back into the gateway.
 * Functions return 0 (or an id/count ≥ 0) or a negative errno; the library never logs.
 */
#ifndef DSV_GATEWAY_H
#define DSV_GATEWAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dsv_ipc.h"
#include "dsv_policy.h"

#ifdef __cplusplus
extern "C" {
#endif

#define DSV_GATEWAY_MAX_INSTANCES 64
#define DSV_GATEWAY_NAME_MAX 64 /* instance name, a Prometheus label value */

/* How the served model writes tool calls (decided from its chat template). */
enum dsv_gateway_tool_format {
        DSV_GATEWAY_TOOLS_NONE,        /* no format: requests with tools are refused */
        DSV_GATEWAY_TOOLS_DEEPSEEK_V3, /* <｜tool▁calls▁begin｜>… (DeepSeek-V3, R1) */
        DSV_GATEWAY_TOOLS_HERMES,      /* <tool_call>{json}</tool_call> (Qwen2.5) */
        DSV_GATEWAY_TOOLS_LLAMA3_JSON, /* {"name":…,"parameters":…} (Llama 3.1) */
        DSV_GATEWAY_TOOLS_FORMAT_COUNT
};

/* What happens to a <think>…</think> block in the output (llama-server's names). */
enum dsv_gateway_reasoning_format {
        DSV_GATEWAY_REASONING_NONE,     /* left in content as generated */
        DSV_GATEWAY_REASONING_DEEPSEEK, /* split into reasoning_content */
        DSV_GATEWAY_REASONING_FORMAT_COUNT
};

/* "none", "deepseek_v3", "hermes", "llama3_json" (vLLM's --tool-call-parser names); NULL
 * out of range. */
const char *dsv_gateway_tool_format_to_string(enum dsv_gateway_tool_format f);
/* "none", "deepseek" (llama-server's --reasoning-format names); NULL out of range. */
const char *dsv_gateway_reasoning_format_to_string(enum dsv_gateway_reasoning_format f);

struct dsv_gateway_config {
        const char *listen_host;           /* numeric IPv4/IPv6 address; default "127.0.0.1" */
        uint16_t port;                     /* 0: ephemeral (see dsv_gateway_port) */
        const char *model;                 /* the model id served and accepted; required */
        const char *const *model_aliases;  /* more ids accepted and listed by /v1/models */
        size_t n_model_aliases;
        int32_t max_model_len;             /* the context, reported by /v1/models and
                                            * /tokenize; 0: not reported */
        const char *api_keys_path;         /* keys, one per line ('#' comments); NULL: none */
        const char *const *api_keys;       /* keys given directly, beside the file's */
        size_t n_api_keys;                 /* any key (file or list): /v1/... need one */
        bool protect_metrics;              /* with keys: /metrics, /health and unknown URLs need
                                            * one too (only /ready stays open, for probes) */
        const char *cors_origins;          /* "*" or a comma-separated list of origins allowed
                                            * by CORS (preflights answered); NULL: no CORS */
        const char *tls_cert_path;         /* PEM certificate chain and key: HTTPS (GnuTLS) */
        const char *tls_key_path;          /* instead of HTTP; both or neither */
        enum dsv_policy_route route;       /* default least-outstanding */
        uint64_t route_seed;
        struct dsv_policy_admit_limits admit;
        size_t max_body_bytes;             /* larger bodies: 413; default 1 MiB */
        size_t max_prompt_bytes;           /* prompt or messages text; larger: 400; default 256 KiB */
        int32_t max_prompt_tokens;         /* longer prompts (tokenized by the worker): 400;
                                            * 0 (default): the context */
        int32_t max_tokens_limit;          /* larger max_tokens: 400; default 32768 */
        int32_t default_max_tokens;        /* when the request sets none; 0 (default): the rest
                                            * of the context after the prompt, as vLLM */
        unsigned connection_timeout_s;     /* idle limit while headers/body arrive, and for a
                                            * streamed block to be written; default 30 */
        unsigned first_byte_timeout_s;     /* a new connection's first byte; default 10; 0: none */
        unsigned header_timeout_s;         /* a new connection's whole header block, however
                                            * steadily it trickles; default 30; 0: none */
        unsigned body_timeout_s;           /* the whole body after its headers; default 60;
                                            * 0: none */
        unsigned max_connections;          /* concurrent HTTP connections; beyond: 503 from the
                                              accept path, then close; default 256 */
        unsigned max_connections_per_ip;   /* from one client address; beyond: 429 from the
                                            * accept path, then close; 0 (default): no cap */
        uint32_t request_timeout_ms;       /* arrival to last token; 0 (default): no deadline */
        uint32_t health_interval_ms;       /* health+stats polling period; 0 (default): off */
        uint32_t max_running_per_instance; /* in-flight requests counted as running until the
                                            * worker reports its max_batch; default 8 */
        int http_rt_priority;              /* > 0: the HTTP threads (accept, libmicrohttpd's
                                            * polling and per-connection threads) run
                                            * SCHED_FIFO at it, above the workers' compute
                                            * threads; 0 (default): SCHED_OTHER */
        enum dsv_gateway_reasoning_format reasoning_format; /* the default of requests; default none */
        bool think_opened;                 /* the template's generation prompt opens a think
                                            * block (it ends in "<think>\n") */
        enum dsv_gateway_tool_format tool_format; /* default none */
        bool metrics_compat_vllm;          /* /metrics also under vLLM's names (vllm:…, labels
                                            * model_name and engine); default off */
};

/* Fills cfg with the defaults above (model NULL: the caller must set it). */
void dsv_gateway_config_init(struct dsv_gateway_config *cfg);

struct dsv_gateway;

/* Creates a gateway (HTTP not started yet). Reads the API key file and the TLS files now:
 * -ENOENT/-EACCES for an unreadable file, -EINVAL for a key file without keys, a TLS file
 * that is not PEM, or a bad config. */
int dsv_gateway_new(const struct dsv_gateway_config *cfg, struct dsv_gateway **ret_gw);

/* Starts the HTTP server (HTTPS with tls_cert_path). -EADDRINUSE, -EINVAL (bad
 * listen_host), -EALREADY, -EKEYREJECTED (GnuTLS refused the certificate and key). When the
 * system refuses SCHED_FIFO at http_rt_priority (-EPERM: no CAP_SYS_NICE or RLIMIT_RTPRIO,
 * no RT runtime in our cgroup), the HTTP threads start SCHED_OTHER and
 * dsv_gateway_stats() reports http_rt_priority 0. */
int dsv_gateway_start(struct dsv_gateway *gw);

/* The bound TCP port once started (useful with port 0), else -ENOTCONN. */
int dsv_gateway_port(const struct dsv_gateway *gw);

/* Stops HTTP (waiting for connection threads, which give up within ~100 ms), closes every
 * link and frees everything. NULL is a no-op. */
void dsv_gateway_free(struct dsv_gateway *gw);

/* ---- instances ------------------------------------------------------------------- */

struct dsv_gateway_instance_config {
        const char *name;  /* label value, 1..DSV_GATEWAY_NAME_MAX-1 bytes, unique */
        int numa_node;     /* label value; -1: unknown */
        const char *url;   /* worker's listen URL (ipc:///… or inproc://…) */
        bool ready;        /* initial caller readiness */
};

/* Adds an instance and dials its worker. Returns its id (≥ 0, stable until removed);
 * -EEXIST for a duplicate name, -ENOSPC when DSV_GATEWAY_MAX_INSTANCES are in use,
 * -EINVAL, or dsv_ipc_dial's error. */
int dsv_gateway_instance_add(struct dsv_gateway *gw, const struct dsv_gateway_instance_config *ic);

/* Replaces the instance's link with a new dial to url (a worker restarted elsewhere).
 * Requests in flight on the old link fail over as if the worker died. -ENOENT for an
 * unknown id. Its metrics are kept. */
int dsv_gateway_instance_set_url(struct dsv_gateway *gw, int id, const char *url);

/* Removes the instance: its in-flight requests fail over, its link closes, its metric
 * series disappear. -ENOENT for an unknown id. */
int dsv_gateway_instance_remove(struct dsv_gateway *gw, int id);

/* Marks the instance ready (routable) or not (draining, restarting); in-flight requests
 * are not affected. -ENOENT for an unknown id. */
int dsv_gateway_instance_set_ready(struct dsv_gateway *gw, int id, bool ready);

/* Feeds the worker's own load (e.g. from the supervisor's stats); NULL forgets it. The
 * load's `ready` field is ignored (see set_ready). -ENOENT for an unknown id. */
int dsv_gateway_instance_set_load(struct dsv_gateway *gw, int id, const struct dsv_policy_worker_load *load);

/* 1 when the instance is up (see "Readiness" above), 0 when not, -ENOENT. */
int dsv_gateway_instance_is_up(struct dsv_gateway *gw, int id);

/* Acceptance lengths a worker reports: 0..8 drafts accepted per verification. */
#define DSV_GATEWAY_SPEC_HIST 9

/* An instance as the gateway sees it now: what GET /metrics reports for it and what
 * `dsvisor status` shows. */
struct dsv_gateway_instance_stats {
        bool up;                  /* see "Readiness" above (dsvisor_instance_up) */
        uint32_t running;         /* requests running (dsvisor_num_requests_running) */
        uint32_t waiting;         /* requests queued (dsvisor_num_requests_waiting) */
        /* The worker's own view is known (a stats reply, or dsv_gateway_instance_set_load);
         * the fields below are from its last stats reply, 0 before one came. */
        bool worker_reported;
        int32_t kv_blocks_used, kv_blocks_total;
        int64_t preemptions;
        double prefix_hit_rate;   /* 0..1 */
        /* Speculative decoding (0 when the worker does not speculate): verifications
         * (a sequence's steps that carried drafts), draft tokens, accepted drafts, and
         * verifications by drafts accepted (0..DSV_GATEWAY_SPEC_HIST-1). */
        int64_t spec_verifications, spec_draft_tokens, spec_accepted_tokens;
        int64_t spec_accepted_hist[DSV_GATEWAY_SPEC_HIST];
        int64_t kv_bytes_per_token; /* the KV pool's bytes per position (0: not reported) */
        int64_t prefix_query_tokens, prefix_hit_tokens; /* since the worker started */
        /* engine steps since the worker started: count, tokens, and per bucket of
         * dsv_ipc_step_token_bounds (not cumulative) */
        int64_t steps, step_tokens, step_tokens_buckets[DSV_IPC_STEP_TOKEN_BUCKETS + 1];
        /* sampled tokens since the worker started, by probability and by entropy
         * (dsv_ipc_token_prob_bin, dsv_ipc_entropy_bin): what drift detection compares */
        int64_t token_prob_hist[DSV_IPC_CONFIDENCE_BINS], entropy_hist[DSV_IPC_CONFIDENCE_BINS];
        int64_t confidence_requests; /* the requests those tokens came from */
        /* the worker's KV disk tier (capacity 0: none): bytes in use and capacity, blocks
         * written, read back, dropped (queue full) and found corrupt, the prefix hit
         * tokens it supplied (of prefix_hit_tokens), and whether an I/O error stopped it */
        int64_t kv_disk_bytes_used, kv_disk_bytes_capacity;
        int64_t kv_disk_blocks_written, kv_disk_blocks_read, kv_disk_blocks_dropped, kv_disk_blocks_corrupt;
        int64_t prefix_disk_hit_tokens;
        bool kv_disk_failed;
};

/* Fills *ret for the instance. running and waiting are the load routing uses (see "Load"
 * above). -ENOENT for an unknown id. */
int dsv_gateway_instance_stats(struct dsv_gateway *gw, int id, struct dsv_gateway_instance_stats *ret);

/* ---- overload ---------------------------------------------------------------------- */

/* Why a generation request was refused before it ran (dsvisor_requests_rejected_total). */
enum dsv_gateway_reject {
        DSV_GATEWAY_REJECT_QUEUE_FULL,        /* 429: admission, the queues are full */
        DSV_GATEWAY_REJECT_DEADLINE,          /* 429: the queue would outlast the deadline */
        DSV_GATEWAY_REJECT_NO_INSTANCE,       /* 503: no instance up */
        DSV_GATEWAY_REJECT_WORKER_OVERLOADED, /* 429: the worker refused it */
        DSV_GATEWAY_REJECT_SHUTTING_DOWN,     /* 503: the worker or the gateway is stopping */
        DSV_GATEWAY_REJECT_COUNT
};

/* "queue_full", "deadline", "no_instance", "worker_overloaded", "shutting_down"; NULL
 * for anything else. */
const char *dsv_gateway_reject_to_string(enum dsv_gateway_reject r);

/* The gateway as a whole under load: what GET /metrics reports and `dsvisor status`
 * shows beside the instances. */
struct dsv_gateway_stats {
        uint64_t rejected[DSV_GATEWAY_REJECT_COUNT]; /* since start, by reason */
        uint64_t connections_refused;   /* answered 503 at the accept path (max_connections) */
        uint32_t connections_open;      /* HTTP connections open now */
        uint32_t max_connections;
        uint32_t queue_length;          /* admitted requests waiting, over all instances */
        int http_rt_priority;           /* the HTTP threads' SCHED_FIFO priority; 0: SCHED_OTHER */
};

/* Fills *ret. -EINVAL for NULL. */
int dsv_gateway_stats(struct dsv_gateway *gw, struct dsv_gateway_stats *ret);

/* ---- metrics ----------------------------------------------------------------------- */

/* Writes more metric families (complete, with # HELP and # TYPE, in the Prometheus text
 * format 0.0.4) after the gateway's own. Returns 0 or a negative errno (the scrape then
 * fails with 500). */
typedef int (*dsv_gateway_metrics_fn)(FILE *out, void *userdata);

/* Installs (or with fn NULL removes) the hook appended to GET /metrics. */
void dsv_gateway_set_metrics_hook(struct dsv_gateway *gw, dsv_gateway_metrics_fn fn, void *userdata);

/* A generation request that finished on an instance (the worker's final message came),
 * for an operator's request log. Strings are valid during the call only. */
struct dsv_gateway_request_log {
        const char *instance;      /* the instance's name */
        const char *endpoint;      /* "chat" or "completions" */
        const char *finish_reason; /* the worker's: stop, length, cancelled, deadline */
        int32_t prompt_tokens, completion_tokens;
        double e2e_s;              /* arrival to the final message, the gateway's clock */
        double queue_s, prefill_s, decode_s, ttft_s; /* the worker's */
        const char *prompt;        /* the prompt text, or the chat messages as a JSON array */
};
typedef void (*dsv_gateway_request_log_fn)(const struct dsv_gateway_request_log *rec, void *userdata);

/* Installs (or with fn NULL removes) the hook called once per finished request, on the
 * thread that served it. Without one no request is recorded anywhere. */
void dsv_gateway_set_request_log_hook(struct dsv_gateway *gw, dsv_gateway_request_log_fn fn, void *userdata);

/* Renders the same text GET /metrics serves into a malloc'd string (owned by the
 * caller), without the hook's part. */
int dsv_gateway_metrics_render(struct dsv_gateway *gw, char **ret_text, size_t *ret_len);

/* ---- the status page ---------------------------------------------------------------- */

/* GET / serves one self-contained HTML page (no external asset or request): the
 * instances with their live latency quantiles and tokens/s, and a chat box streaming
 * from /v1/chat/completions. It polls GET /status, a JSON object:
 *   {"model", "keys": whether /v1/... need a key, "window_s": the live view's span,
 *    "instances": [{"name", "up", "running", "waiting", "requests", "window_s",
 *                   "e2e_p50_s", "e2e_p99_s", "ttft_p50_s", "ttft_p99_s", "itl_p50_s",
 *                   "itl_p99_s", "tokens_per_s"}],       (null: no request in the window)
 *    "host": the status hook's JSON value, or null}
 * Both need a key exactly when /metrics does (protect_metrics with keys): a browser
 * cannot send a bearer header with a page load, so with protect_metrics the page is for
 * clients (or a proxy) that add it. */

/* Writes one JSON value (the embedder's view of the instances: CPUs, limits, restarts)
 * for GET /status's "host". Same threading rules as the metrics hook; a value that is
 * not JSON, or an error, gives "host": null. */
typedef int (*dsv_gateway_status_fn)(FILE *out, void *userdata);

/* Installs (or with fn NULL removes) the status hook. */
void dsv_gateway_set_status_hook(struct dsv_gateway *gw, dsv_gateway_status_fn fn, void *userdata);

/* ---- tokenization ------------------------------------------------------------------- */

/* POST /tokenize and POST /detokenize, in vLLM's shape, need a tokenizer, which the
 * gateway does not link: the embedder provides one. Both functions are called from HTTP
 * threads, several at once, without any gateway lock held; they must not call back into
 * the gateway. On failure they return a negative errno and put a message for the client
 * in err (-EINVAL, -EILSEQ: 400; others: 500). */
struct dsv_gateway_tokenizer {
        /* Encodes text (messages_json NULL) or the chat messages_json (a JSON array,
         * rendered by the served chat template, with the generation prompt when
         * add_generation_prompt) into up to cap ids; returns the total count, which may
         * exceed cap (then it is called again with a larger buffer). */
        int (*encode)(void *userdata, const char *text, const char *messages_json, bool add_special_tokens,
                      bool add_generation_prompt, int32_t *ids, size_t cap, char *err, size_t err_size);
        /* Decodes ids into *ret_text (malloc'd, NUL-terminated, freed by the gateway). */
        int (*decode)(void *userdata, const int32_t *ids, size_t n_ids, char **ret_text, char *err,
                      size_t err_size);
        void *userdata;
};

/* Installs (or with t NULL removes) the tokenizer; without one, /tokenize and /detokenize
 * answer 501. The struct is copied. */
void dsv_gateway_set_tokenizer(struct dsv_gateway *gw, const struct dsv_gateway_tokenizer *t);

#ifdef __cplusplus
}
#endif
#endif
