/* The status page: GET / answers status_page.html (embedded at build time, so it is
 * edited as HTML), GET /status the JSON it polls, the instances as the gateway sees them
 * with each one's live view (metrics.c) and the embedder's hook under "host". */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cors.h"
#include "server.h"

/* The page may run its own inline script and style and talk to this server, nothing
 * else: a browser refuses any asset or request elsewhere. */
#define STATUS_PAGE_CSP                                                                                           \
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "         \
        "img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

enum MHD_Result dsv__gw_status_page(struct MHD_Connection *conn) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(
                dsv__gw_status_page_html_len, (void *)dsv__gw_status_page_html, MHD_RESPMEM_PERSISTENT);
        if (!resp)
                return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/html; charset=utf-8");
        MHD_add_response_header(resp, "Content-Security-Policy", STATUS_PAGE_CSP);
        MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        dsv__gw_cors_decorate(conn, resp);
        enum MHD_Result r = MHD_queue_response(conn, 200, resp);
        MHD_destroy_response(resp);
        return r;
}

static void add_seconds(cJSON *o, const char *name, double v) {
        if (isnan(v))
                cJSON_AddNullToObject(o, name);
        else
                cJSON_AddNumberToObject(o, name, v);
}

static cJSON *instance_object(const struct gw_instance_sample *v, const struct gw_live *live) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", v->name);
        cJSON_AddBoolToObject(o, "up", v->stats.up);
        cJSON_AddNumberToObject(o, "running", v->stats.running);
        cJSON_AddNumberToObject(o, "waiting", v->stats.waiting);
        cJSON_AddNumberToObject(o, "requests", (double)live->requests);
        cJSON_AddNumberToObject(o, "window_s", live->window_s);
        add_seconds(o, "e2e_p50_s", live->e2e_p50_s);
        add_seconds(o, "e2e_p99_s", live->e2e_p99_s);
        add_seconds(o, "ttft_p50_s", live->ttft_p50_s);
        add_seconds(o, "ttft_p99_s", live->ttft_p99_s);
        add_seconds(o, "itl_p50_s", live->itl_p50_s);
        add_seconds(o, "itl_p99_s", live->itl_p99_s);
        cJSON_AddNumberToObject(o, "tokens_per_s", live->tokens_per_s);
        return o;
}

/* The hook's value, parsed (so a broken one cannot break the answer); NULL: none. */
static cJSON *host_value(const struct gw_status_source *src) {
        if (!src->hook)
                return NULL;
        char *text = NULL;
        size_t len = 0;
        FILE *f = open_memstream(&text, &len);
        if (!f)
                return NULL;
        int r = src->hook(f, src->hook_userdata);
        if (fclose(f) != 0 && r == 0)
                r = -EIO;
        cJSON *v = r == 0 ? cJSON_ParseWithLength(text, len) : NULL;
        free(text);
        return v;
}

enum MHD_Result dsv__gw_status_json(const struct gw_status_source *src, struct MHD_Connection *conn) {
        struct gw_instance_sample v[DSV_GATEWAY_MAX_INSTANCES];
        size_t n = dsv__gw_instances_sample(src->calls, v);
        int64_t now = dsv__gw_now_ns();
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "model", src->model);
        cJSON_AddBoolToObject(root, "keys", src->keys);
        cJSON_AddNumberToObject(root, "window_s", GW_LIVE_WINDOW_S);
        cJSON *arr = cJSON_AddArrayToObject(root, "instances");
        for (size_t i = 0; i < n; i++) {
                struct gw_live live;
                if (dsv__gw_metrics_live(src->metrics, v[i].slot, v[i].gen, now, &live) == 0)
                        cJSON_AddItemToArray(arr, instance_object(&v[i], &live));
        }
        cJSON *host = host_value(src);
        if (host)
                cJSON_AddItemToObject(root, "host", host);
        else
                cJSON_AddNullToObject(root, "host");
        return dsv__gw_reply_json(conn, 200, root);
}
