/* Shared helpers of the model-file tests: temp folders, converting fixtures, reading
 * source tensors straight from a safetensors file (independently of the engine). */
#ifndef TEST_MODELFILE_HELPERS_H
#define TEST_MODELFILE_HELPERS_H

#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dse.h"

/* A fresh temp folder, removed (one level deep) by tmp_rm. */
static inline char *tmp_dir(void) {
        static char buf[8][256];
        static int slot;
        char *d = buf[slot++ % 8];
        const char *t = getenv("TMPDIR");
        snprintf(d, sizeof buf[0], "%s/dsv-modelfile-XXXXXX", t && *t ? t : "/tmp");
        return mkdtemp(d);
}

static inline void tmp_rm(const char *dir) {
        DIR *d = opendir(dir);
        if (!d)
                return;
        struct dirent *e;
        char p[4096];
        while ((e = readdir(d))) {
                if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
                        continue;
                snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
                unlink(p);
        }
        closedir(d);
        rmdir(dir);
}

static inline int copy_file(const char *from, const char *to) {
        FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
        int ok = a && b;
        char buf[65536];
        size_t n;
        while (ok && (n = fread(buf, 1, sizeof buf, a)) > 0)
                ok = fwrite(buf, 1, n, b) == n;
        if (a)
                fclose(a);
        if (b && fclose(b) != 0)
                ok = 0;
        return ok ? 0 : -1;
}

/* A minimal, independent safetensors lookup for the tests: finds "name" in the JSON
 * header of `path` by string search and returns a malloc'ed copy of its bytes. Good
 * enough for the fixtures, whose headers are machine-written. */
static inline void *st_tensor_bytes(const char *path, const char *name, char *ret_dtype, size_t *ret_len) {
        size_t flen;
        uint8_t *f = slurp(path, &flen);
        if (!f || flen < 8)
                return free(f), NULL;
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--)
                hlen = hlen << 8 | f[i];
        char key[256];
        snprintf(key, sizeof key, "\"%s\":", name);
        char *h = (char *)f + 8, save = h[hlen];
        h[hlen] = 0;
        char *p = strstr(h, key);
        void *out = NULL;
        if (p) {
                char *dt = strstr(p, "\"dtype\":");
                char *off = strstr(p, "\"data_offsets\":");
                unsigned long long b, e;
                if (dt && off && sscanf(off, "\"data_offsets\":[%llu,%llu]", &b, &e) == 2 &&
                    sscanf(dt, "\"dtype\":\"%15[A-Z0-9_]\"", ret_dtype) == 1 && 8 + hlen + e <= flen) {
                        h[hlen] = save; /* the first data byte */
                        out = malloc(e - b + 1);
                        memcpy(out, f + 8 + hlen + b, e - b);
                        *ret_len = e - b;
                }
        }
        h[hlen] = save;
        free(f);
        return out;
}

/* Converts fixture `name` into dir/model.dse; returns the path. */
static inline const char *convert_fixture(const char *fixture_dir, const char *dir, const char *quant, int *ret_r,
                                          struct dse_diag *diag) {
        static char out[8][4096];
        static int slot;
        char *o = out[slot++ % 8];
        snprintf(o, sizeof out[0], "%s/model.dse", dir);
        *ret_r = dse_model_convert_hf(fixture_dir, o, quant, diag);
        return o;
}

#endif
