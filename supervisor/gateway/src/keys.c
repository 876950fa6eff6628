/* API keys: a file of keys, and a comparison whose time does not depend
 * on the guess's contents, so a client cannot find a key byte by byte. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keys.h"

#define MAX_KEY_BYTES 512

void dsv__gw_keys_done(struct dsv_gw_keys *k) {
        if (!k)
                return;
        for (size_t i = 0; i < k->n; i++) {
                /* Do not leave keys in freed memory. */
                volatile char *p = k->keys[i];
                for (size_t j = 0; p[j]; j++)
                        p[j] = 0;
                free(k->keys[i]);
        }
        free(k->keys);
        k->keys = NULL;
        k->n = 0;
}

int dsv__gw_keys_add(struct dsv_gw_keys *k, const char *key) {
        if (!k || !key || !key[0] || strlen(key) > MAX_KEY_BYTES)
                return -EINVAL;
        char **grown = realloc(k->keys, (k->n + 1) * sizeof *k->keys);
        if (!grown)
                return -ENOMEM;
        k->keys = grown;
        if (!(k->keys[k->n] = strdup(key)))
                return -ENOMEM;
        k->n++;
        return 0;
}

int dsv__gw_keys_load(const char *path, struct dsv_gw_keys *ret) {
        if (!path || !ret)
                return -EINVAL;
        FILE *f = fopen(path, "re");
        if (!f)
                return -errno;
        struct dsv_gw_keys k = {0};
        char line[MAX_KEY_BYTES + 2];
        int r = 0;
        while (fgets(line, sizeof line, f)) {
                size_t len = strlen(line);
                if (len == sizeof line - 1 && line[len - 1] != '\n') {
                        r = -EINVAL; /* a key longer than MAX_KEY_BYTES */
                        break;
                }
                char *s = line, *end = line + len;
                while (*s == ' ' || *s == '\t')
                        s++;
                while (end > s && (end[-1] == '\n' || end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
                        *--end = 0;
                if (!*s || *s == '#')
                        continue;
                if ((r = dsv__gw_keys_add(&k, s)) < 0)
                        break;
        }
        if (r == 0 && ferror(f))
                r = -EIO;
        fclose(f);
        if (r == 0 && k.n == 0)
                r = -EINVAL;
        if (r < 0) {
                dsv__gw_keys_done(&k);
                return r;
        }
        *ret = k;
        return 0;
}

/* Compares every byte of the key whatever the guess holds; the guess's length only
 * decides which bytes are read. */
static int key_equal(const char *key, const char *guess, size_t guess_len) {
        size_t key_len = strlen(key);
        unsigned diff = key_len != guess_len;
        for (size_t i = 0; i < key_len; i++)
                diff |= (unsigned char)key[i] ^ (unsigned char)(i < guess_len ? guess[i] : 0);
        return diff == 0;
}

int dsv__gw_keys_check(const struct dsv_gw_keys *k, const char *authorization) {
        if (!k || !authorization || strncmp(authorization, "Bearer ", 7) != 0)
                return 0;
        const char *guess = authorization + 7;
        while (*guess == ' ')
                guess++;
        size_t len = strlen(guess);
        int ok = 0;
        for (size_t i = 0; i < k->n; i++)
                ok |= key_equal(k->keys[i], guess, len);
        return ok;
}
