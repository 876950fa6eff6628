/* Opening a file the user named as input. O_NONBLOCK keeps open() from waiting for a
 * writer when the name is a FIFO; the S_ISREG check then refuses FIFOs, devices and
 * directories before anything reads from them (a read would block or never end). */
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

static const char *file_kind(mode_t mode) {
        if (S_ISDIR(mode))
                return "a directory";
        if (S_ISFIFO(mode))
                return "a FIFO";
        if (S_ISCHR(mode) || S_ISBLK(mode))
                return "a device";
        return "a socket";
}

int dse__open_input(const char *path, struct dse_diag *reterr) {
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return dse__fail(reterr, -errno, "cannot open '%s': %s", path, strerror(errno));
        struct stat st;
        if (fstat(fd, &st) < 0) {
                int r = -errno;
                close(fd);
                return dse__fail(reterr, r, "cannot stat '%s': %s", path, strerror(-r));
        }
        if (!S_ISREG(st.st_mode)) {
                close(fd);
                return dse__fail(reterr, -EINVAL, "'%s' is %s, not a regular file", path, file_kind(st.st_mode));
        }
        return fd;
}
