/* The supervisor's control socket — a UNIX stream socket
 * <runtime dir>/control.sock, mode 0600 inside the 0700 runtime directory
 * (dsv_ipc_runtime_dir). One request line, {"cmd":"status"} or {"cmd":"stop"}, and one
 * JSON reply line per connection. The peer must have our uid (SO_PEERCRED). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "sup.h"

int sup_control_path(const char *runtime_dir, char *buf, size_t size) {
        int n = snprintf(buf, size, "%s/control.sock", runtime_dir);
        if (n < 0 || (size_t)n >= size || (size_t)n >= sizeof(((struct sockaddr_un *)0)->sun_path))
                return -ENAMETOOLONG;
        return 0;
}

static int fill_addr(const char *path, struct sockaddr_un *sa) {
        memset(sa, 0, sizeof *sa);
        sa->sun_family = AF_UNIX;
        if (strlen(path) >= sizeof sa->sun_path)
                return -ENAMETOOLONG;
        strcpy(sa->sun_path, path);
        return 0;
}

int sup_control_listen(const char *path) {
        struct sockaddr_un sa;
        int r = fill_addr(path, &sa);
        if (r < 0)
                return r;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0)
                return -errno;
        /* A socket file that nobody answers on is a dead supervisor's: replace it. */
        int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (probe >= 0) {
                int c = connect(probe, (struct sockaddr *)&sa, sizeof sa);
                close(probe);
                if (c == 0) {
                        close(fd);
                        return -EADDRINUSE;
                }
        }
        unlink(path);
        mode_t old = umask(0177);
        r = bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 ? -errno : 0;
        umask(old);
        if (r == 0 && chmod(path, 0600) < 0)
                r = -errno;
        if (r == 0 && listen(fd, 16) < 0)
                r = -errno;
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

/* Reads until '\n' or EOF into a growing buffer, within the deadline. */
static int read_line(int fd, int64_t deadline, size_t max, char **ret) {
        size_t len = 0, cap = 4096;
        char *buf = malloc(cap);
        if (!buf)
                return -ENOMEM;
        for (;;) {
                int left = (int)(deadline - dsv_clock_now_ms());
                struct pollfd p = {.fd = fd, .events = POLLIN};
                if (left <= 0 || poll(&p, 1, left) == 0) {
                        free(buf);
                        return -ETIMEDOUT;
                }
                if (len + 1 >= cap) {
                        if (cap >= max) {
                                free(buf);
                                return -EMSGSIZE;
                        }
                        char *nb = realloc(buf, cap * 2);
                        if (!nb) {
                                free(buf);
                                return -ENOMEM;
                        }
                        buf = nb;
                        cap *= 2;
                }
                ssize_t n = read(fd, buf + len, cap - len - 1);
                if (n < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (n < 0) {
                        int r = -errno;
                        free(buf);
                        return r;
                }
                len += (size_t)n;
                buf[len] = 0;
                if (n == 0 || memchr(buf, '\n', len))
                        break;
        }
        char *nl = memchr(buf, '\n', len);
        if (nl)
                *nl = 0;
        *ret = buf;
        return 0;
}

static int write_all(int fd, const char *p, size_t len) {
        while (len > 0) {
                ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
                if (w < 0 && errno == EINTR)
                        continue;
                if (w < 0 && errno == EAGAIN) {
                        struct pollfd pf = {.fd = fd, .events = POLLOUT};
                        if (poll(&pf, 1, 1000) <= 0)
                                return -ETIMEDOUT;
                        continue;
                }
                if (w < 0)
                        return -errno;
                p += w;
                len -= (size_t)w;
        }
        return 0;
}

int sup_control_write(int fd, const char *text) {
        int r = write_all(fd, text, strlen(text));
        return r < 0 ? r : write_all(fd, "\n", 1);
}

int sup_control_read_cmd(int fd, int timeout_ms, char *buf, size_t size) {
        struct ucred cred;
        socklen_t len = sizeof cred;
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
                return -errno;
        if (cred.uid != geteuid())
                return -EPERM;
        char *line;
        int r = read_line(fd, dsv_clock_now_ms() + timeout_ms, 64 << 10, &line);
        if (r < 0)
                return r;
        cJSON *j = cJSON_Parse(line);
        free(line);
        const cJSON *cmd = cJSON_GetObjectItemCaseSensitive(j, "cmd");
        r = cJSON_IsString(cmd) && strlen(cmd->valuestring) < size ? 0 : -EPROTO;
        if (r == 0)
                snprintf(buf, size, "%s", cmd->valuestring);
        cJSON_Delete(j);
        return r;
}

int sup_control_call(const char *path, const char *cmd, int timeout_ms, char **ret) {
        struct sockaddr_un sa;
        int r = fill_addr(path, &sa);
        if (r < 0)
                return r;
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        char req[128];
        snprintf(req, sizeof req, "{\"cmd\":\"%s\"}", cmd);
        r = sup_control_write(fd, req);
        if (r == 0)
                r = read_line(fd, dsv_clock_now_ms() + timeout_ms, 16 << 20, ret);
        close(fd);
        return r;
}
