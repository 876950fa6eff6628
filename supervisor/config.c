/* `dsvisor start` configuration: command-line options and a JSON config
 * file with the same names ("instances", "rt-priority", ...). The file is read after the
 * command line; every option the command line set wins. Unknown keys, wrong JSON types
 * and bad values are errors that name the key. One table drives both. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dse.h"
#include "sup.h"

enum opt_kind { K_STR, K_INT, K_BOOL, K_HUGEPAGES, K_MIB, K_KV_DTYPE, K_LIST /* repeatable; JSON: a string or an array */ };

struct opt_def {
        const char *name;
        enum opt_kind kind;
        size_t off;    /* offsetof(struct sup_config, field) */
        size_t size;   /* K_STR: the array size */
        long min, max; /* K_INT / K_MIB */
        const char *help;
};

#define F(field) offsetof(struct sup_config, field), sizeof(((struct sup_config *)0)->field)

static const struct opt_def opts[] = {
        {"model", K_STR, F(model), 0, 0, "native model file or HF folder (default: the bundled model)"},
        {"model-id", K_STR, F(model_id), 0, 0, "model id served by the API (default: the model's name)"},
        {"reasoning-format", K_STR, F(reasoning_format), 0, 0,
         "deepseek: a <think> block goes to reasoning_content; none: it stays in content (default: deepseek "
         "when the chat template thinks)"},
        {"worker", K_STR, F(worker), 0, 0, "dsvisor-worker binary (default: beside dsvisor)"},
        {"instances", K_INT, F(n_instances), 0, 256, "worker instances (default: one per NUMA node)"},
        {"threads-per-instance", K_INT, F(threads_per_instance), 1, 1024, "compute threads (default: its cores)"},
        {"host", K_STR, F(host), 0, 0, "HTTP address (default 127.0.0.1)"},
        {"port", K_INT, F(port), 0, 65535, "HTTP port (default 8080; 0: any free port)"},
        {"rt-priority", K_INT, F(rt_priority), 0, SUP_RT_PRIORITY_MAX, "SCHED_FIFO priority 1..49 (0: off)"},
        {"hugepages", K_HUGEPAGES, F(hugepages), 0, 0, "auto | require | off (shared weights)"},
        {"no-housekeeping", K_BOOL, F(no_housekeeping), 0, 0, "give every core to instances"},
        {"cpus", K_STR, F(cpus), 0, 0, "CPUs instances may use, e.g. 2-15 (default: every CPU dsvisor was given)"},
        {"housekeeping-cpus", K_STR, F(housekeeping_cpus), 0, 0,
         "CPUs kept for the supervisor, gateway and IRQs (default: one core of node 0 when there are more than 2)"},
        {"grace-ms", K_INT, F(grace_ms), 0, 3600000, "drain time on stop (default 10000)"},
        {"n-ctx", K_INT, F(n_ctx), 0, 1 << 22, "context length per sequence (worker default)"},
        {"max-batch", K_INT, F(max_batch), 0, 1024, "sequences per step (worker default)"},
        {"kv-mem-mib", K_INT, F(kv_mem_mib), 0, 1 << 24, "KV pool per instance (worker default)"},
        {"speculative", K_STR, F(speculative), 0, 0, "speculative decoding: ngram | mtp (DeepSeek-V3 MTP module) | draft (draft-model) | off (worker default: off; draft with draft-model)"},
        {"draft-model", K_STR, F(draft_model), 0, 0,
         "absolute path of a smaller model with the served model's tokenizer that drafts for it in each worker"},
        {"spec-k-min", K_INT, F(spec_k_min), 0, 8, "fewest drafts a sequence verifies in a step where it drafts (worker default)"},
        {"spec-k-max", K_INT, F(spec_k_max), 0, 8, "most drafts a sequence verifies per step (worker default)"},
        {"kv-dtype", K_KV_DTYPE, F(kv_dtype), 0, 0, "KV cache element type: f32 | bf16 | fp8 | int8 (bf16)"},
        {"kv-disk", K_STR, F(kv_disk), 0, 0,
         "directory of a second KV tier per instance (DIR/INSTANCE.kvtier; absolute; with kv-disk-gib)"},
        {"kv-disk-gib", K_INT, F(kv_disk_gib), 0, 1 << 20, "size of each instance's KV tier file"},
        {"max-queue", K_INT, F(max_queue), 1, 100000, "requests waiting per instance before 429 (32)"},
        {"max-queue-wait-pct", K_INT, F(max_queue_wait_pct), 0, 100000,
         "expected queue wait before 429, in % of a service time, i.e. once the batch is full a queue of that % of it (0: no limit; 50)"},
        {"max-connections", K_INT, F(max_connections), 16, 1000000, "HTTP connections before 503 (512)"},
        {"memory-max-mib", K_MIB, F(memory_max_bytes), 0, 1L << 30, "memory.max per instance (0: none)"},
        {"allow-unenforced", K_BOOL, F(allow_unenforced), 0, 0, "start even when a limit asked for is not in effect"},
        {"restart-limit", K_INT, F(restart_limit), 1, 64, "restarts within the window before giving up (5)"},
        {"restart-window-ms", K_INT, F(restart_window_ms), 1000, 86400000, "crash-loop window (60000)"},
        {"restart-backoff-ms", K_INT, F(restart_backoff_min_ms), 1, 600000, "delay of a repeated restart (100; the first is immediate)"},
        {"restart-backoff-max-ms", K_INT, F(restart_backoff_max_ms), 1, 3600000, "largest restart delay (30000)"},
        {"runtime-dir", K_STR, F(runtime_dir), 0, 0, "control and worker sockets (default: private runtime dir)"},
        {"cgroup-parent", K_STR, F(cgroup_parent), 0, 0,
         "instance cgroups go in <own cgroup>/PATH (relative, e.g. inference/prod)"},
        {"served-model-name", K_LIST, F(served_model_names), 0, 0,
         "a model id the API serves and accepts (repeatable; the first is the id answers carry; "
         "default: --model-id)"},
        {"default-max-tokens", K_INT, F(default_max_tokens), 0, 1 << 22,
         "max_tokens when a request sets none (0, default: the rest of the context)"},
        {"max-prompt-tokens", K_INT, F(max_prompt_tokens), 0, 1 << 22,
         "longer prompts are refused 400 (0, default: the context)"},
        {"max-prompt-bytes", K_INT, F(max_prompt_bytes), 1024, 1 << 28,
         "prompt or messages text per request; larger: 400 (262144)"},
        {"request-timeout-ms", K_INT, F(request_timeout_ms), 0, INT_MAX,
         "arrival to last token; past it 504 and the generation is cancelled (0, default: none)"},
        {"chat-template", K_STR, F(chat_template), 0, 0,
         "Jinja chat template file the workers use instead of the model's (checked at start)"},
        {"api-key", K_LIST, F(api_keys), 0, 0,
         "a key clients send as 'Authorization: Bearer KEY' (repeatable; visible in ps: prefer --api-key-file)"},
        {"api-key-file", K_STR, F(api_key_file), 0, 0,
         "file of keys, one per line, '#' comments; not readable or writable by others"},
        {"protect-metrics", K_BOOL, F(protect_metrics), 0, 0, "/metrics, /health and the status page need a key too (/ready stays open)"},
        {"allow-unauthenticated", K_BOOL, F(allow_unauthenticated), 0, 0,
         "serve a non-loopback --host without any API key"},
        {"cors-origins", K_STR, F(cors_origins), 0, 0,
         "browser origins allowed by CORS: '*' or a comma-separated list (default: none)"},
        {"tls-cert", K_STR, F(tls_cert), 0, 0, "PEM certificate chain: serve HTTPS (with --tls-key)"},
        {"tls-key", K_STR, F(tls_key), 0, 0, "PEM private key for --tls-cert; not readable or writable by others"},
        {"max-connections-per-ip", K_INT, F(max_connections_per_ip), 0, 1000000,
         "HTTP connections from one client address before 429 (0, default: no cap)"},
        {"first-byte-timeout-s", K_INT, F(first_byte_timeout_s), 0, 3600,
         "a new connection's first byte, else 408 and closed (10; 0: none)"},
        {"header-timeout-s", K_INT, F(header_timeout_s), 0, 3600,
         "a new connection's whole request header, however it trickles, else 408 (30; 0: none)"},
        {"body-timeout-s", K_INT, F(body_timeout_s), 0, 86400, "a request body after its header, else closed (60; 0: none)"},
        {"idle-timeout-s", K_INT, F(idle_timeout_s), 1, 3600,
         "silence while a request arrives, and a stalled stream write, before closing (30)"},
        {"metrics-compat", K_STR, F(metrics_compat), 0, 0,
         "vllm: /metrics also exports every request and engine series under vLLM's names (vllm:..., "
         "labels model_name and engine), for dashboards written for vLLM"},
        {"log-format", K_STR, F(log_format), 0, 0,
         "text (default: \"<prio>dsvisor: ...\", journald keeps the level) or json (one object a line: time, "
         "level, source, instance, event, fields), for the supervisor and its workers"},
        {"log-requests", K_BOOL, F(log_requests), 0, 0,
         "log one line per finished request (event \"request\"), with its prompt text; off: no request lines, "
         "no prompt text in any log"},
        {"config", K_STR, F(config_path), 0, 0, "JSON file with any of these options"},
};
#define N_OPTS (sizeof opts / sizeof opts[0])
_Static_assert(N_OPTS <= sizeof(((struct sup_config *)0)->cli_set), "cli_set too small");

void sup_config_init(struct sup_config *cfg) {
        memset(cfg, 0, sizeof *cfg);
        snprintf(cfg->host, sizeof cfg->host, "127.0.0.1");
        cfg->port = SUP_PORT_DEFAULT;
        cfg->hugepages = DSV_HUGEPAGES_MODE_AUTO;
        cfg->grace_ms = SUP_GRACE_MS_DEFAULT;
        cfg->max_queue = SUP_MAX_QUEUE_DEFAULT;
        cfg->max_queue_wait_pct = SUP_MAX_QUEUE_WAIT_PCT_DEFAULT;
        cfg->max_connections = SUP_MAX_CONNECTIONS_DEFAULT;
        cfg->restart_limit = 5;
        cfg->restart_window_ms = 60000;
        cfg->restart_backoff_min_ms = 100;
        cfg->restart_backoff_max_ms = 30000;
        cfg->max_prompt_bytes = SUP_MAX_PROMPT_BYTES_DEFAULT;
        cfg->first_byte_timeout_s = SUP_FIRST_BYTE_TIMEOUT_S_DEFAULT;
        cfg->header_timeout_s = SUP_HEADER_TIMEOUT_S_DEFAULT;
        cfg->body_timeout_s = SUP_BODY_TIMEOUT_S_DEFAULT;
        cfg->idle_timeout_s = SUP_IDLE_TIMEOUT_S_DEFAULT;
}

int sup_config_list_split(char *buf, char **ret, int max) {
        int n = 0;
        for (char *p = buf, *nl; *p && n < max && (nl = strchr(p, '\n')); p = nl + 1) {
                *nl = 0;
                ret[n++] = p;
        }
        return n;
}

int sup_host_is_loopback(const char *host) {
        unsigned char a[16];
        if (inet_pton(AF_INET, host, a) == 1)
                return a[0] == 127;
        if (inet_pton(AF_INET6, host, a) != 1)
                return 0;
        static const unsigned char v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        static const unsigned char one[16] = {[15] = 1};
        return memcmp(a, one, 16) == 0 || (memcmp(a, v4mapped, 12) == 0 && a[12] == 127);
}

void sup_start_usage(FILE *out) {
        fprintf(out, "usage: dsvisor start [--model M] [--instances N] [options]\n\n"
                     "Runs the instances and the HTTP gateway in the foreground until SIGTERM;\n"
                     "SIGHUP re-reads --config, applies what changed (new workers one instance at a\n"
                     "time) and names what it cannot apply.\n\n");
        for (size_t i = 0; i < N_OPTS; i++) {
                char left[64];
                snprintf(left, sizeof left, "--%s%s", opts[i].name, opts[i].kind == K_BOOL ? "" : " V");
                if (strlen(left) > 28) { /* the long names: help on the next line */
                        fprintf(out, "  %s\n  %-28s %s\n", left, "", opts[i].help);
                        continue;
                }
                fprintf(out, "  %-28s %s\n", left, opts[i].help);
        }
}

static int set_int(struct sup_config *cfg, const struct opt_def *o, long long v, char *err, size_t err_size) {
        if (v < o->min || v > o->max) {
                snprintf(err, err_size, "%s: %lld is out of range %ld..%ld", o->name, v, o->min, o->max);
                return -EINVAL;
        }
        if (o->kind == K_MIB)
                *(uint64_t *)((char *)cfg + o->off) = (uint64_t)v << 20;
        else
                *(int *)((char *)cfg + o->off) = (int)v;
        return 0;
}

/* Sets option o from its text form (command line). */
static int set_text(struct sup_config *cfg, const struct opt_def *o, const char *s, char *err, size_t err_size) {
        char *dst = (char *)cfg + o->off;
        switch (o->kind) {
        case K_STR:
                if (!*s || strlen(s) >= o->size) {
                        snprintf(err, err_size, "%s: %s", o->name, *s ? "too long" : "empty value");
                        return -EINVAL;
                }
                memcpy(dst, s, strlen(s) + 1);
                return 0;
        case K_INT:
        case K_MIB: {
                char *end;
                errno = 0;
                long long v = strtoll(s, &end, 10);
                if (errno || end == s || *end) {
                        snprintf(err, err_size, "%s: '%s' is not an integer", o->name, s);
                        return -EINVAL;
                }
                return set_int(cfg, o, v, err, err_size);
        }
        case K_HUGEPAGES:
                for (int m = 0; m < DSV_HUGEPAGES_MODE_COUNT; m++)
                        if (strcmp(s, dsv_hugepages_mode_to_string(m)) == 0) {
                                *(enum dsv_hugepages_mode *)dst = m;
                                return 0;
                        }
                snprintf(err, err_size, "%s: '%s' is not one of auto, require, off", o->name, s);
                return -EINVAL;
        case K_KV_DTYPE: {
                enum dse_kv_dtype t;
                struct dse_diag diag;
                if (dse_kv_dtype_parse(s, &t, &diag) < 0) {
                        snprintf(err, err_size, "%s: %s", o->name, diag.msg);
                        return -EINVAL;
                }
                snprintf(dst, o->size, "%s", dse_kv_dtype_to_string(t));
                return 0;
        }
        case K_BOOL:
                *(bool *)dst = true;
                return 0;
        case K_LIST: {
                size_t used = strlen(dst), len = strlen(s);
                if (!len || strchr(s, '\n') || used + len + 2 > o->size) {
                        /* the value itself is not echoed: it may be a key */
                        snprintf(err, err_size, "%s: %s", o->name,
                                 !len ? "empty value" : strchr(s, '\n') ? "a value with a newline" : "too many or too long values");
                        return -EINVAL;
                }
                memcpy(dst + used, s, len);
                memcpy(dst + used + len, "\n", 2);
                return 0;
        }
        }
        return -EINVAL;
}

static int check_config(const struct sup_config *cfg, char *err, size_t err_size) {
        if (cfg->restart_backoff_min_ms > cfg->restart_backoff_max_ms) {
                snprintf(err, err_size, "restart-backoff-ms %d is above restart-backoff-max-ms %d",
                         cfg->restart_backoff_min_ms, cfg->restart_backoff_max_ms);
                return -EINVAL;
        }
        if (cfg->speculative[0] && strcmp(cfg->speculative, "ngram") != 0 && strcmp(cfg->speculative, "mtp") != 0 &&
            strcmp(cfg->speculative, "draft") != 0 && strcmp(cfg->speculative, "off") != 0) {
                snprintf(err, err_size, "speculative: '%s' is not a method; use ngram, mtp, draft or off",
                         cfg->speculative);
                return -EINVAL;
        }
        if (!strcmp(cfg->speculative, "draft") && !cfg->draft_model[0]) {
                snprintf(err, err_size, "speculative: draft needs draft-model (the model that drafts); the methods "
                         "without one are ngram, mtp and off");
                return -EINVAL;
        }
        if (cfg->draft_model[0] && cfg->speculative[0] && strcmp(cfg->speculative, "draft") != 0) {
                snprintf(err, err_size, "draft-model goes with speculative draft (or no speculative), not '%s'",
                         cfg->speculative);
                return -EINVAL;
        }
        if (cfg->draft_model[0] && cfg->draft_model[0] != '/') {
                snprintf(err, err_size, "draft-model: '%s' must be an absolute path", cfg->draft_model);
                return -EINVAL;
        }
        if (cfg->spec_k_min > 0 && cfg->spec_k_max > 0 && cfg->spec_k_min > cfg->spec_k_max) {
                snprintf(err, err_size, "spec-k-min %d is above spec-k-max %d", cfg->spec_k_min, cfg->spec_k_max);
                return -EINVAL;
        }
        if (cfg->metrics_compat[0] && strcmp(cfg->metrics_compat, "vllm") != 0) {
                snprintf(err, err_size, "metrics-compat: '%s' is not vllm (the only other naming exported)",
                         cfg->metrics_compat);
                return -EINVAL;
        }
        enum dsv_log_format lf;
        if (cfg->log_format[0] && dsv_log_format_parse(cfg->log_format, &lf) < 0) {
                snprintf(err, err_size, "log-format: '%s' is not text or json", cfg->log_format);
                return -EINVAL;
        }
        if (cfg->runtime_dir[0] && cfg->runtime_dir[0] != '/') {
                snprintf(err, err_size, "runtime-dir: '%s' is not an absolute path", cfg->runtime_dir);
                return -EINVAL;
        }
        if (!cfg->kv_disk[0] != (cfg->kv_disk_gib == 0)) {
                snprintf(err, err_size, "kv-disk and kv-disk-gib go together");
                return -EINVAL;
        }
        if (cfg->kv_disk[0] && cfg->kv_disk[0] != '/') {
                snprintf(err, err_size, "kv-disk: '%s' is not an absolute path", cfg->kv_disk);
                return -EINVAL;
        }
        if (cfg->model_id[0] && cfg->served_model_names[0]) {
                snprintf(err, err_size, "model-id and served-model-name both name the model: give one");
                return -EINVAL;
        }
        if (!cfg->tls_cert[0] != !cfg->tls_key[0]) {
                snprintf(err, err_size, "%s is given without %s", cfg->tls_cert[0] ? "tls-cert" : "tls-key",
                         cfg->tls_cert[0] ? "tls-key" : "tls-cert");
                return -EINVAL;
        }
        bool keyed = cfg->api_keys[0] || cfg->api_key_file[0];
        if (cfg->protect_metrics && !keyed) {
                snprintf(err, err_size, "protect-metrics needs a key: give api-key or api-key-file");
                return -EINVAL;
        }
        if (!keyed && !cfg->allow_unauthenticated && !sup_host_is_loopback(cfg->host)) {
                snprintf(err, err_size,
                         "host %s is not a loopback address and no API key is set: give api-key-file (or "
                         "api-key), or allow-unauthenticated to serve it open",
                         cfg->host);
                return -EINVAL;
        }
        /* Only below our own cgroup: that is all a delegated service may touch. */
        const char *why = "";
        if (dsv_cgroup_parent_check(cfg->cgroup_parent, &why) < 0) {
                snprintf(err, err_size, "cgroup-parent: '%s' %s", cfg->cgroup_parent, why);
                return -EINVAL;
        }
        return 0;
}

/* A JSON key names an option with '-' or '_' between words: "rt-priority" or
 * "rt_priority" (JSON tools and most config languages prefer the latter). */
static bool key_matches(const char *key, const char *name) {
        for (; *key && *name; key++, name++)
                if (*key != *name && !(*key == '_' && *name == '-'))
                        return false;
        return *key == *name;
}

int sup_config_apply_json(struct sup_config *cfg, const char *text, char *err, size_t err_size) {
        cJSON *root = cJSON_Parse(text);
        int r = 0;
        if (!root || !cJSON_IsObject(root)) {
                const char *at = cJSON_GetErrorPtr();
                snprintf(err, err_size, "not a JSON object%s%.20s%s", at && root == NULL ? " near '" : "",
                         at && root == NULL ? at : "", at && root == NULL ? "'" : "");
                cJSON_Delete(root);
                return -EINVAL;
        }
        for (const cJSON *it = root->child; it && r == 0; it = it->next) {
                const struct opt_def *o = NULL;
                for (size_t i = 0; i < N_OPTS; i++)
                        if (key_matches(it->string, opts[i].name))
                                o = &opts[i];
                if (!o || strcmp(o->name, "config") == 0) {
                        snprintf(err, err_size, "unknown key \"%s\"", it->string);
                        r = -EINVAL;
                        break;
                }
                if (cfg->cli_set[o - opts])
                        continue; /* the command line wins */
                switch (o->kind) {
                case K_STR:
                case K_HUGEPAGES:
                case K_KV_DTYPE:
                        if (!cJSON_IsString(it)) {
                                snprintf(err, err_size, "%s: expected a string", o->name);
                                r = -EINVAL;
                        } else {
                                r = set_text(cfg, o, it->valuestring, err, err_size);
                        }
                        break;
                case K_INT:
                case K_MIB:
                        /* range before the cast: converting a double outside long long is undefined */
                        if (cJSON_IsNumber(it) && !(it->valuedouble >= -0x1p63 && it->valuedouble < 0x1p63)) {
                                snprintf(err, err_size, "%s: %g is out of range %ld..%ld", o->name, it->valuedouble,
                                         o->min, o->max);
                                r = -EINVAL;
                        } else if (!cJSON_IsNumber(it) || it->valuedouble != (double)(long long)it->valuedouble) {
                                snprintf(err, err_size, "%s: expected an integer", o->name);
                                r = -EINVAL;
                        } else {
                                r = set_int(cfg, o, (long long)it->valuedouble, err, err_size);
                        }
                        break;
                case K_LIST:
                        if (cJSON_IsString(it)) {
                                r = set_text(cfg, o, it->valuestring, err, err_size);
                        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) > 0) {
                                const cJSON *e;
                                cJSON_ArrayForEach(e, it) {
                                        if (r == 0 && !cJSON_IsString(e)) {
                                                snprintf(err, err_size, "%s: expected strings", o->name);
                                                r = -EINVAL;
                                        }
                                        if (r == 0)
                                                r = set_text(cfg, o, e->valuestring, err, err_size);
                                }
                        } else {
                                snprintf(err, err_size, "%s: expected a string or an array of strings", o->name);
                                r = -EINVAL;
                        }
                        break;
                case K_BOOL:
                        if (!cJSON_IsBool(it)) {
                                snprintf(err, err_size, "%s: expected true or false", o->name);
                                r = -EINVAL;
                        } else {
                                *(bool *)((char *)cfg + o->off) = cJSON_IsTrue(it);
                        }
                        break;
                }
        }
        cJSON_Delete(root);
        return r < 0 ? r : check_config(cfg, err, err_size);
}

static int read_file(const char *path, char **ret, char *err, size_t err_size) {
        FILE *f = fopen(path, "re");
        if (!f) {
                int r = -errno;
                snprintf(err, err_size, "cannot read config '%s': %s", path, strerror(-r));
                return r;
        }
        char *buf = NULL;
        size_t len = 0, cap = 0;
        for (;;) {
                if (len + 4096 + 1 > cap) {
                        cap = cap ? cap * 2 : 8192;
                        char *nb = realloc(buf, cap);
                        if (!nb) {
                                free(buf);
                                fclose(f);
                                return -ENOMEM;
                        }
                        buf = nb;
                }
                size_t n = fread(buf + len, 1, 4096, f);
                len += n;
                if (n < 4096)
                        break;
                if (len > (1u << 20)) {
                        snprintf(err, err_size, "config '%s' is larger than 1 MiB", path);
                        free(buf);
                        fclose(f);
                        return -EFBIG;
                }
        }
        fclose(f);
        buf[len] = 0;
        *ret = buf;
        return 0;
}

static int apply_file(struct sup_config *cfg, char *err, size_t err_size) {
        char *text = NULL;
        char inner[256];
        int r = read_file(cfg->config_path, &text, err, err_size);
        if (r < 0)
                return r;
        r = sup_config_apply_json(cfg, text, inner, sizeof inner);
        free(text);
        if (r < 0)
                snprintf(err, err_size, "config '%s': %s", cfg->config_path, inner);
        return r;
}

int sup_config_parse(int argc, char **argv, struct sup_config *cfg, char *err, size_t err_size) {
        struct option lopts[N_OPTS + 2];
        for (size_t i = 0; i < N_OPTS; i++)
                lopts[i] = (struct option){opts[i].name, opts[i].kind == K_BOOL ? no_argument : required_argument,
                                           NULL, (int)(256 + i)};
        lopts[N_OPTS] = (struct option){"help", no_argument, NULL, 'h'};
        lopts[N_OPTS + 1] = (struct option){0};

        sup_config_init(cfg);
        optind = 1;
        opterr = 0;
        int c;
        while ((c = getopt_long(argc, argv, "h", lopts, NULL)) != -1) {
                if (c == 'h')
                        return 1;
                if (c < 256 || c >= 256 + (int)N_OPTS) {
                        snprintf(err, err_size, "unknown or incomplete option '%s'", argv[optind - 1]);
                        return -EINVAL;
                }
                const struct opt_def *o = &opts[c - 256];
                int r = set_text(cfg, o, optarg ? optarg : "", err, err_size);
                if (r < 0)
                        return r;
                cfg->cli_set[c - 256] = 1;
        }
        if (optind < argc) {
                snprintf(err, err_size, "unexpected argument '%s'", argv[optind]);
                return -EINVAL;
        }
        if (cfg->config_path[0]) {
                int r = apply_file(cfg, err, err_size);
                if (r < 0)
                        return r;
        }
        return check_config(cfg, err, err_size);
}

int sup_config_reload(const struct sup_config *cfg, struct sup_config *ret, char *err, size_t err_size) {
        struct sup_config next;
        sup_config_init(&next);
        /* Keep every value the command line set, then let the file fill the rest. */
        for (size_t i = 0; i < N_OPTS; i++)
                if (cfg->cli_set[i]) {
                        memcpy((char *)&next + opts[i].off, (const char *)cfg + opts[i].off, opts[i].size);
                        next.cli_set[i] = 1;
                }
        memcpy(next.config_path, cfg->config_path, sizeof next.config_path);
        if (next.config_path[0]) {
                int r = apply_file(&next, err, err_size);
                if (r < 0)
                        return r;
        }
        int r = check_config(&next, err, err_size);
        if (r < 0)
                return r;
        *ret = next;
        return 0;
}

/* ---- reload: what changed and how it can be applied --------------------------------- */

/* How a running supervisor can take each option on SIGHUP. An option not listed here
 * (a new one) needs a full restart: a reload never claims what it does not do. */
static const struct {
        const char *name;
        enum sup_reload_how how;
        const char *why; /* SUP_RELOAD_FULL_RESTART: what holds the old value */
} reload_rules[] = {
        {"model", SUP_RELOAD_NEW_WORKERS, NULL},
        {"model-id", SUP_RELOAD_FULL_RESTART, "the gateway serves and accepts the id it started with"},
        {"reasoning-format", SUP_RELOAD_FULL_RESTART, "the gateway splits reasoning as it decided at start"},
        {"metrics-compat", SUP_RELOAD_FULL_RESTART, "the gateway names its metrics as it decided at start"},
        {"log-format", SUP_RELOAD_FULL_RESTART, "the supervisor and its workers write the format they started with"},
        {"log-requests", SUP_RELOAD_FULL_RESTART, "the gateway's request log is set up at start"},
        {"worker", SUP_RELOAD_NEW_WORKERS, NULL},
        {"instances", SUP_RELOAD_FULL_RESTART, "placement (instances, their CPUs and threads) is decided at start"},
        {"threads-per-instance", SUP_RELOAD_FULL_RESTART,
         "placement (instances, their CPUs and threads) is decided at start"},
        {"no-housekeeping", SUP_RELOAD_FULL_RESTART, "placement (instances, their CPUs and threads) is decided at start"},
        {"host", SUP_RELOAD_FULL_RESTART, "the gateway listens where it started"},
        {"port", SUP_RELOAD_FULL_RESTART, "the gateway listens where it started"},
        {"rt-priority", SUP_RELOAD_NEW_WORKERS, NULL},
        {"hugepages", SUP_RELOAD_NEW_WORKERS, NULL},
        {"grace-ms", SUP_RELOAD_NEW_WORKERS, NULL},
        {"n-ctx", SUP_RELOAD_NEW_WORKERS, NULL},
        {"max-batch", SUP_RELOAD_NEW_WORKERS, NULL},
        {"kv-mem-mib", SUP_RELOAD_NEW_WORKERS, NULL},
        {"speculative", SUP_RELOAD_NEW_WORKERS, NULL},
        {"draft-model", SUP_RELOAD_NEW_WORKERS, NULL},
        {"spec-k-min", SUP_RELOAD_NEW_WORKERS, NULL},
        {"spec-k-max", SUP_RELOAD_NEW_WORKERS, NULL},
        {"kv-dtype", SUP_RELOAD_NEW_WORKERS, NULL},
        {"kv-disk", SUP_RELOAD_NEW_WORKERS, NULL},
        {"kv-disk-gib", SUP_RELOAD_NEW_WORKERS, NULL},
        {"memory-max-mib", SUP_RELOAD_NEW_WORKERS, NULL},
        {"allow-unenforced", SUP_RELOAD_FULL_RESTART, "it decides only whether dsvisor start may begin"},
        {"restart-limit", SUP_RELOAD_AT_ONCE, NULL},
        {"restart-window-ms", SUP_RELOAD_AT_ONCE, NULL},
        {"restart-backoff-ms", SUP_RELOAD_AT_ONCE, NULL},
        {"restart-backoff-max-ms", SUP_RELOAD_AT_ONCE, NULL},
        {"runtime-dir", SUP_RELOAD_FULL_RESTART, "the control socket and the worker sockets live there"},
        {"cgroup-parent", SUP_RELOAD_FULL_RESTART, "the instances' cgroup host is set up at start"},
        {"chat-template", SUP_RELOAD_NEW_WORKERS, NULL},
};

static bool option_differs(const struct opt_def *o, const struct sup_config *a, const struct sup_config *b) {
        const char *x = (const char *)a + o->off, *y = (const char *)b + o->off;
        return o->kind == K_STR || o->kind == K_LIST || o->kind == K_KV_DTYPE ? strncmp(x, y, o->size) != 0
                                                                               : memcmp(x, y, o->size) != 0;
}

int sup_config_changes(const struct sup_config *cfg, const struct sup_config *next, struct sup_config_change *ret,
                       int max) {
        int n = 0;
        for (size_t i = 0; i < N_OPTS && n < max; i++) {
                if (!option_differs(&opts[i], cfg, next))
                        continue;
                struct sup_config_change c = {.option = opts[i].name, .how = SUP_RELOAD_FULL_RESTART,
                                              .why = "a running supervisor cannot change it"};
                for (size_t k = 0; k < sizeof reload_rules / sizeof reload_rules[0]; k++)
                        if (strcmp(reload_rules[k].name, opts[i].name) == 0) {
                                c.how = reload_rules[k].how;
                                c.why = reload_rules[k].why;
                        }
                ret[n++] = c;
        }
        return n;
}

int sup_config_take(struct sup_config *cfg, const struct sup_config *next, const char *option) {
        for (size_t i = 0; i < N_OPTS; i++)
                if (strcmp(opts[i].name, option) == 0) {
                        memcpy((char *)cfg + opts[i].off, (const char *)next + opts[i].off, opts[i].size);
                        return 0;
                }
        return -ENOENT;
}

/* ---- limits that must be in effect -------------------------------------------------- */

/* The options that ask for a cgroup limit, and which. */
static const struct {
        const char *name;
        enum dsv_cgroup_limit limit;
} limit_options[] = {
        {"memory-max-mib", DSV_CGROUP_LIMIT_MEMORY_MAX},
};

int sup_config_check_enforced(const struct sup_config *cfg, const struct dsv_cgroup_report *rep,
                              const char *no_cgroups, char *err, size_t err_size) {
        static const struct sup_config none; /* a limit option's 0 is "no limit" */
        if (cfg->allow_unenforced)
                return 0;
        for (size_t k = 0; k < sizeof limit_options / sizeof limit_options[0]; k++) {
                const struct opt_def *o = NULL;
                for (size_t i = 0; i < N_OPTS; i++)
                        if (strcmp(opts[i].name, limit_options[k].name) == 0)
                                o = &opts[i];
                if (!o || !option_differs(o, cfg, &none))
                        continue; /* not asked for */
                const struct dsv_cgroup_report_entry *e = rep ? &rep->e[limit_options[k].limit] : NULL;
                if (e && e->requested && e->applied)
                        continue;
                snprintf(err, err_size, "--%s is not in effect (%s: %s); pass --allow-unenforced to run without it",
                         o->name, dsv_cgroup_limit_to_string(limit_options[k].limit),
                         !rep ? no_cgroups : e->reason[0] ? e->reason : "not applied");
                return -EPERM;
        }
        return 0;
}

/* ---- file values the command line overrides ----------------------------------------- */

int sup_config_cli_overrides(const struct sup_config *cfg, const char **ret, int max) {
        char *text = NULL;
        char err[256];
        if (!cfg->config_path[0] || read_file(cfg->config_path, &text, err, sizeof err) < 0)
                return 0;
        struct sup_config file;
        sup_config_init(&file);
        int n = 0;
        cJSON *root = cJSON_Parse(text);
        if (sup_config_apply_json(&file, text, err, sizeof err) == 0 && cJSON_IsObject(root))
                for (const cJSON *it = root->child; it && n < max; it = it->next)
                        for (size_t i = 0; i < N_OPTS && n < max; i++)
                                if (cfg->cli_set[i] && key_matches(it->string, opts[i].name) &&
                                    option_differs(&opts[i], cfg, &file))
                                        ret[n++] = opts[i].name;
        cJSON_Delete(root);
        free(text);
        return n;
}
