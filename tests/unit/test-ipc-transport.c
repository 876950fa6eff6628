#include <stdbool.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "dsv_ipc.h"
#include "t.h"

static int wait_peer(struct dsv_ipc_conn *c) {
        for (int i = 0; i < 200 && dsv_ipc_peers(c) == 0; i++)
                usleep(10 * 1000);
        return dsv_ipc_peers(c);
}

static void exchange(const char *url) {
        struct dsv_ipc_conn *worker, *sup;
        ASSERT_OK(dsv_ipc_listen(url, &worker));
        ASSERT_OK(dsv_ipc_dial(url, &sup));
        ASSERT_EQ(wait_peer(sup), 1);
        /* Several requests in flight, answered out of order, matched by id. */
        for (uint64_t id = 1; id <= 3; id++) {
                struct dsv_ipc_msg m = {.type = DSV_IPC_REQUEST,
                                        .u.request = {.id = id, .input = DSV_IPC_INPUT_PROMPT, .prompt = "hi"}};
                dsv_ipc_sampling_init(&m.u.request.sampling);
                ASSERT_OK(dsv_ipc_send(sup, &m));
        }
        uint64_t seen = 0;
        for (int i = 0; i < 3; i++) {
                struct dsv_ipc_msg in;
                ASSERT_OK(dsv_ipc_recv(worker, &in, 2000, NULL, 0));
                ASSERT_EQ(in.type, DSV_IPC_REQUEST);
                seen |= 1ull << in.u.request.id;
                dsv_ipc_msg_done(&in);
        }
        ASSERT_EQ(seen, 0xE);
        for (uint64_t id = 3; id >= 1; id--) {
                struct dsv_ipc_msg t = {.type = DSV_IPC_TOKEN, .u.token = {.id = id, .token = (int32_t)id, .text = "x"}};
                ASSERT_OK(dsv_ipc_send(worker, &t));
        }
        for (uint64_t id = 3; id >= 1; id--) {
                struct dsv_ipc_msg in;
                ASSERT_OK(dsv_ipc_recv(sup, &in, 2000, NULL, 0));
                ASSERT_EQ(in.u.token.id, id);
                dsv_ipc_msg_done(&in);
        }
        struct dsv_ipc_msg none;
        ASSERT_ERR(dsv_ipc_recv(sup, &none, 50, NULL, 0), -ETIMEDOUT);
        dsv_ipc_close(sup);
        dsv_ipc_close(worker);
}

TEST(inproc_exchange) {
        exchange("inproc://dsv-test");
}

TEST(ipc_socket_is_private) {
        char dir[] = "/tmp/dsv-ipc-XXXXXX";
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        chmod(dir, 0700);
        char url[320], path[256];
        snprintf(path, sizeof path, "%s/w0.sock", dir);
        snprintf(url, sizeof url, "ipc://%s", path);
        exchange(url);
        struct dsv_ipc_conn *c;
        ASSERT_OK(dsv_ipc_listen(url, &c));
        struct stat st;
        ASSERT_OK(stat(path, &st));
        ASSERT_EQ(st.st_mode & 0777, 0600);
        dsv_ipc_close(c);
        /* A directory others can enter is refused, and so are abstract/relative names. */
        chmod(dir, 0755);
        ASSERT_ERR(dsv_ipc_listen(url, &c), -EPERM);
        ASSERT_ERR(dsv_ipc_listen("ipc://@abstract", &c), -EINVAL);
        ASSERT_ERR(dsv_ipc_listen("tcp://127.0.0.1:1", &c), -EINVAL);
        unlink(path);
        rmdir(dir);
}

TEST(foreign_uid_peer_is_dropped) {
        if (getuid() != 0)
                T_SKIP("needs root to connect as another uid");
        char dir[] = "/tmp/dsv-ipc-XXXXXX";
        ASSERT_TRUE(mkdtemp(dir) != NULL);
        char url[320], path[100];
        snprintf(path, sizeof path, "%s/w.sock", dir);
        snprintf(url, sizeof url, "ipc://%s", path);
        struct dsv_ipc_conn *worker;
        ASSERT_OK(dsv_ipc_listen(url, &worker));
        /* Open the file modes so that only the peer-uid check can stop the intruder. */
        chmod(dir, 0711);
        chmod(path, 0666);
        /* nng cannot run in a forked child, so the intruder speaks the SP-over-IPC
         * handshake by hand: "\0SP\0", protocol 0x0011 (PAIR1), two reserved bytes. */
        pid_t pid = fork();
        if (pid == 0) {
                static const unsigned char hello[8] = {0, 'S', 'P', 0, 0x00, 0x11, 0, 0};
                struct sockaddr_un sa = {.sun_family = AF_UNIX};
                snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
                if (setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(3);
                int fd = socket(AF_UNIX, SOCK_STREAM, 0);
                if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0)
                        _exit(4);
                if (write(fd, hello, sizeof hello) != sizeof hello)
                        _exit(5);
                unsigned char reply[8];
                (void)!read(fd, reply, sizeof reply);
                usleep(300 * 1000);
                _exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
        ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        ASSERT_TRUE(dsv_ipc_rejected_peers(worker) >= 1);
        ASSERT_EQ(dsv_ipc_peers(worker), 0);
        dsv_ipc_close(worker);
        unlink(path);
        rmdir(dir);
}

/* A raw nng peer (no dsv_ipc) sees the wire: how many nng messages a batch became. */
static int raw_recv(nng_socket s, char *buf, size_t size) {
        char *m;
        size_t len;
        if (nng_recv(s, &m, &len, NNG_FLAG_ALLOC) != 0)
                return -1;
        int n = len < size ? (int)len : (int)size - 1;
        memcpy(buf, m, (size_t)n);
        buf[n] = 0;
        nng_free(m, len);
        return n;
}

static void add_tokens(struct dsv_ipc_batch *b, int n, uint64_t first_id) {
        for (int i = 0; i < n; i++) {
                struct dsv_ipc_msg t = {.type = DSV_IPC_TOKEN,
                                        .u.token = {.id = first_id + (uint64_t)i, .token = i, .text = "tok"}};
                if (dsv_ipc_batch_add(b, &t) < 0)
                        return;
        }
}

/* A step's events go out as one "events" message to a peer that said minor 1, as one
 * message per event to a peer that said nothing (it predates "events"), and a batch of
 * one as the plain event. */
TEST(batch_is_one_message_for_a_new_peer_and_split_for_an_old_one) {
        struct dsv_ipc_conn *worker;
        ASSERT_OK(dsv_ipc_listen("inproc://dsv-batch", &worker));
        nng_socket raw;
        ASSERT_EQ(nng_pair1_open(&raw), 0);
        ASSERT_EQ(nng_socket_set_ms(raw, NNG_OPT_RECVTIMEO, 2000), 0);
        ASSERT_EQ(nng_dial(raw, "inproc://dsv-batch", NULL, 0), 0);
        ASSERT_EQ(wait_peer(worker), 1);
        struct dsv_ipc_batch b;
        ASSERT_OK(dsv_ipc_batch_init(&b, 8192, 64));
        char buf[8192];
        struct dsv_ipc_msg in;

        /* An old peer's message (no "minor"). */
        const char *old = "{\"v\":1,\"type\":\"cancel\",\"id\":5}";
        ASSERT_EQ(nng_send(raw, (void *)old, strlen(old), 0), 0);
        ASSERT_OK(dsv_ipc_recv(worker, &in, 2000, NULL, 0));
        ASSERT_EQ(in.minor, 0);
        add_tokens(&b, 3, 10);
        ASSERT_OK(dsv_ipc_send_batch(worker, &b));
        ASSERT_EQ(dsv_ipc_batch_count(&b), 0);
        for (int i = 0; i < 3; i++) {
                ASSERT_TRUE(raw_recv(raw, buf, sizeof buf) > 0);
                ASSERT_TRUE(strstr(buf, "\"type\":\"token\"") != NULL);
                ASSERT_TRUE(strstr(buf, "events") == NULL);
        }

        /* A new peer's message. */
        const char *neu = "{\"v\":1,\"minor\":1,\"type\":\"cancel\",\"id\":6}";
        ASSERT_EQ(nng_send(raw, (void *)neu, strlen(neu), 0), 0);
        ASSERT_OK(dsv_ipc_recv(worker, &in, 2000, NULL, 0));
        ASSERT_EQ(in.minor, 1);
        add_tokens(&b, 5, 20);
        ASSERT_OK(dsv_ipc_send_batch(worker, &b));
        ASSERT_TRUE(raw_recv(raw, buf, sizeof buf) > 0);
        char head[96]; /* the sender's own minor */
        snprintf(head, sizeof head, "{\"v\":1,\"minor\":%d,\"type\":\"events\",\"events\":[", DSV_IPC_PROTOCOL_MINOR);
        ASSERT_TRUE(strncmp(buf, head, strlen(head)) == 0);
        struct dsv_ipc_msg *msgs;
        size_t n;
        ASSERT_OK(dsv_ipc_msgs_decode(buf, strlen(buf), &msgs, &n, NULL, 0));
        ASSERT_EQ(n, 5);
        for (size_t i = 0; i < n; i++)
                dsv_ipc_msg_done(&msgs[i]);
        free(msgs);
        add_tokens(&b, 1, 30);
        ASSERT_OK(dsv_ipc_send_batch(worker, &b));
        ASSERT_TRUE(raw_recv(raw, buf, sizeof buf) > 0);
        ASSERT_TRUE(strstr(buf, "\"type\":\"token\"") != NULL && strstr(buf, "events") == NULL);
        ASSERT_OK(dsv_ipc_send_batch(worker, &b)); /* empty: nothing goes */
        nng_socket_set_ms(raw, NNG_OPT_RECVTIMEO, 50);
        ASSERT_TRUE(raw_recv(raw, buf, sizeof buf) < 0);
        dsv_ipc_batch_done(&b);
        nng_close(raw);
        dsv_ipc_close(worker);
}

/* dsv_ipc_recv hands a batch out one event per call, in order, then reads on. */
TEST(recv_hands_out_a_batch_event_by_event) {
        struct dsv_ipc_conn *worker, *sup;
        ASSERT_OK(dsv_ipc_listen("inproc://dsv-batch2", &worker));
        ASSERT_OK(dsv_ipc_dial("inproc://dsv-batch2", &sup));
        ASSERT_EQ(wait_peer(sup), 1);
        struct dsv_ipc_msg probe = {.type = DSV_IPC_HEALTH, .u.probe.seq = 1};
        ASSERT_OK(dsv_ipc_send(sup, &probe)); /* tells the worker side our minor */
        struct dsv_ipc_msg in;
        ASSERT_OK(dsv_ipc_recv(worker, &in, 2000, NULL, 0));
        ASSERT_EQ(in.minor, DSV_IPC_PROTOCOL_MINOR);
        struct dsv_ipc_batch b;
        ASSERT_OK(dsv_ipc_batch_init(&b, 8192, 64));
        add_tokens(&b, 7, 100);
        ASSERT_OK(dsv_ipc_send_batch(worker, &b));
        add_tokens(&b, 2, 200);
        ASSERT_OK(dsv_ipc_send_batch(worker, &b));
        uint64_t want[] = {100, 101, 102, 103, 104, 105, 106, 200, 201};
        for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
                ASSERT_OK(dsv_ipc_recv(sup, &in, 2000, NULL, 0));
                ASSERT_EQ(in.type, DSV_IPC_TOKEN);
                ASSERT_EQ(in.u.token.id, want[i]);
                dsv_ipc_msg_done(&in);
        }
        ASSERT_ERR(dsv_ipc_recv(sup, &in, 50, NULL, 0), -ETIMEDOUT);
        /* a batch half handed out when the connection closes is freed (LSan checks) */
        add_tokens(&b, 4, 300);
        ASSERT_OK(dsv_ipc_send_batch(worker, &b));
        ASSERT_OK(dsv_ipc_recv(sup, &in, 2000, NULL, 0));
        dsv_ipc_msg_done(&in);
        dsv_ipc_batch_done(&b);
        dsv_ipc_close(sup);
        dsv_ipc_close(worker);
}
