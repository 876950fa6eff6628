/* HTTPS: libmicrohttpd does TLS through GnuTLS (MHD_USE_TLS) from PEM text in memory
 * (MHD_OPTION_HTTPS_MEM_CERT/KEY); this file reads and checks that text. */
#include <errno.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tls.h"

#define MAX_PEM_BYTES (1u << 20)

static void wipe_free(char *s) {
        if (!s)
                return;
        volatile char *p = s;
        while (*p)
                *p++ = 0;
        free(s);
}

static int read_pem(const char *path, const char *block, char **ret) {
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        char *buf = malloc(MAX_PEM_BYTES + 1);
        size_t n = buf ? fread(buf, 1, MAX_PEM_BYTES + 1, f) : 0;
        int r = !buf ? -ENOMEM : ferror(f) ? -EIO : n > MAX_PEM_BYTES ? -EFBIG : 0;
        fclose(f);
        if (r == 0) {
                buf[n] = 0;
                /* a NUL inside is not PEM; "PRIVATE KEY" also matches "RSA PRIVATE KEY" and "EC PRIVATE KEY" */
                const char *b = strstr(buf, "-----BEGIN ");
                if (!b || !strstr(b, block) || strlen(buf) != n)
                        r = -EINVAL;
        }
        if (r < 0) {
                wipe_free(buf);
                return r;
        }
        *ret = buf;
        return 0;
}

int dsv__gw_tls_load(const char *cert_path, const char *key_path, struct gw_tls *ret) {
        *ret = (struct gw_tls){0};
        if (!cert_path && !key_path)
                return 0;
        if (!cert_path || !key_path)
                return -EINVAL;
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES)
                return -EOPNOTSUPP;
        int r = read_pem(cert_path, "CERTIFICATE", &ret->cert_pem);
        if (r == 0)
                r = read_pem(key_path, "PRIVATE KEY", &ret->key_pem);
        if (r < 0)
                dsv__gw_tls_done(ret);
        return r;
}

void dsv__gw_tls_done(struct gw_tls *t) {
        if (!t)
                return;
        free(t->cert_pem);
        wipe_free(t->key_pem);
        *t = (struct gw_tls){0};
}
