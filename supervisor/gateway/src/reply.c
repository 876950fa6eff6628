/* Answers over libmicrohttpd: a body from memory, JSON, and errors in OpenAI's shape. */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "cors.h"
#include "server.h"

static enum MHD_Result respond(struct MHD_Connection *conn, unsigned status, const char *type, const char *body,
                               size_t len, uint32_t retry_after_s, bool close) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
        if (!resp)
                return MHD_NO;
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
        if (retry_after_s) {
                char v[16];
                snprintf(v, sizeof v, "%u", retry_after_s);
                MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, v);
        }
        if (status == 401)
                MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
        if (close) /* libmicrohttpd closes the connection after a response saying so */
                MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
        dsv__gw_cors_decorate(conn, resp);
        enum MHD_Result r = MHD_queue_response(conn, status, resp);
        MHD_destroy_response(resp);
        return r;
}

enum MHD_Result dsv__gw_reply(struct MHD_Connection *conn, unsigned status, const char *type, const char *body,
                              size_t len, uint32_t retry_after_s) {
        return respond(conn, status, type, body, len, retry_after_s, false);
}

enum MHD_Result dsv__gw_reply_json(struct MHD_Connection *conn, unsigned status, cJSON *o) {
        char *s = o ? cJSON_PrintUnformatted(o) : NULL;
        cJSON_Delete(o);
        if (!s)
                return MHD_NO;
        enum MHD_Result r = dsv__gw_reply(conn, status, "application/json", s, strlen(s), 0);
        cJSON_free(s);
        return r;
}

static enum MHD_Result respond_error(struct MHD_Connection *conn, const struct dsv_gw_error *e,
                                     struct gw_metrics *count, bool close) {
        char *s;
        size_t len;
        if (count)
                dsv__gw_metrics_status(count, e->status);
        if (dsv__gw_error_json(e, &s, &len) < 0)
                return MHD_NO;
        enum MHD_Result r = respond(conn, (unsigned)e->status, "application/json", s, len, e->retry_after_s, close);
        free(s);
        return r;
}

enum MHD_Result dsv__gw_reply_error(struct MHD_Connection *conn, const struct dsv_gw_error *e,
                                    struct gw_metrics *count) {
        return respond_error(conn, e, count, false);
}

enum MHD_Result dsv__gw_reply_refusal(struct MHD_Connection *conn, const struct dsv_gw_error *e,
                                      struct gw_metrics *count) {
        return respond_error(conn, e, count, true);
}

enum MHD_Result dsv__gw_reply_simple_error(struct MHD_Connection *conn, int status, const char *type,
                                           const char *code, const char *msg, struct gw_metrics *count) {
        struct dsv_gw_error e;
        dsv__gw_error_set(&e, status, type, code, NULL, "%s", msg);
        return dsv__gw_reply_error(conn, &e, count);
}
