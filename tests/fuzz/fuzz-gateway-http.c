/* libFuzzer target: arbitrary bytes sent to a running gateway over a TCP connection, as a
 * client would (request line, fields, framing, body); the write side is then shut and
 * the answer read to the end. The gateway has no instance, so a completion that parses
 * is answered 503 after its whole request path ran; /tokenize and /detokenize run a
 * stand-in tokenizer. An answer, when there is one, must
 * begin with an HTTP/1.x status line; the sanitizers catch the rest. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "dsv_gateway.h"

#define ANSWER_WAIT_MS 2000
#define PORT_RETRIES 50
#define PORT_RETRY_WAIT_MS 100

/* A stand-in tokenizer, so that /tokenize and /detokenize bodies reach their parser:
 * one id per byte. */
static int bytes_encode(void *userdata, const char *text, const char *messages_json, bool add_special_tokens,
                        bool add_generation_prompt, int32_t *ids, size_t cap, char *err, size_t err_size) {
        const char *s = text ? text : messages_json;
        size_t n = strlen(s);
        for (size_t i = 0; i < n && i < cap; i++)
                ids[i] = (unsigned char)s[i];
        return (int)n;
}

static int bytes_decode(void *userdata, const int32_t *ids, size_t n_ids, char **ret_text, char *err,
                        size_t err_size) {
        char *t = malloc(n_ids + 1);
        if (!t)
                return -ENOMEM;
        for (size_t i = 0; i < n_ids; i++) {
                if (ids[i] < 1 || ids[i] > 255) {
                        free(t);
                        return -EINVAL;
                }
                t[i] = (char)ids[i];
        }
        t[n_ids] = 0;
        *ret_text = t;
        return 0;
}

static int gateway_port(void) {
        static struct dsv_gateway *gw; /* one gateway for the whole run */
        if (!gw) {
                struct dsv_gateway_config cfg;
                dsv_gateway_config_init(&cfg);
                cfg.model = "m";
                cfg.max_body_bytes = 1u << 16;
                cfg.connection_timeout_s = 2;
                if (dsv_gateway_new(&cfg, &gw) != 0 || dsv_gateway_start(gw) != 0)
                        abort();
                dsv_gateway_set_tokenizer(gw, &(struct dsv_gateway_tokenizer){.encode = bytes_encode,
                                                                              .decode = bytes_decode});
        }
        return dsv_gateway_port(gw);
}

/* Stops the run on a failure of the harness itself, naming it. */
static _Noreturn void harness_failed(const char *what, int err) {
        fprintf(stderr, "fuzz-gateway-http: %s: %s\n", what, strerror(err));
        abort();
}

/* A connection to the gateway. Two cases are the harness's limits, not the gateway's,
 * and wait and try again: thousands of connections a second can use up the local ports
 * for a moment, and libFuzzer's timer signal (installed without SA_RESTART) can
 * interrupt a connect() that waits for a full listen queue to drain. Any other failure
 * stops the run. */
static int connect_gateway(void) {
        struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)gateway_port())};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        int err = 0;
        for (int attempt = 0; attempt < PORT_RETRIES; attempt++) {
                int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
                if (fd < 0)
                        harness_failed("socket()", errno);
                if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
                        return fd;
                err = errno;
                close(fd);
                if (err != EADDRNOTAVAIL && err != EINTR)
                        harness_failed("connect() to the gateway", err);
                poll(NULL, 0, PORT_RETRY_WAIT_MS);
        }
        harness_failed("connect() to the gateway, after retries", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
        int fd = connect_gateway();
        for (size_t sent = 0; sent < size;) {
                ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break; /* the gateway closed early: its answer is read below */
                sent += (size_t)n;
        }
        shutdown(fd, SHUT_WR);
        char head[16];
        size_t got = 0;
        for (;;) {
                struct pollfd p = {.fd = fd, .events = POLLIN};
                int ready = poll(&p, 1, ANSWER_WAIT_MS);
                if (ready < 0 && errno == EINTR)
                        continue;
                if (ready <= 0)
                        break;
                char buf[4096];
                ssize_t n = recv(fd, buf, sizeof buf, 0);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        break;
                if (got < sizeof head) {
                        size_t k = (size_t)n < sizeof head - got ? (size_t)n : sizeof head - got;
                        memcpy(head + got, buf, k);
                        got += k;
                }
        }
        /* closed with a reset: the answer is in, and no TIME_WAIT keeps the local port */
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &(struct linger){.l_onoff = 1, .l_linger = 0}, sizeof(struct linger));
        close(fd);
        if (got > 0 && (got < 9 || memcmp(head, "HTTP/1.", 7) != 0))
                abort(); /* an answer that is not HTTP */
        return 0;
}
